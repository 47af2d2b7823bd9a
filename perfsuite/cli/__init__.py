"""The ``perfsuite`` command line: trace, compare, ab, report."""
