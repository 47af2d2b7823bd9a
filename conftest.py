"""Root conftest: loads the perfsuite pytest plugin for the tests and the timed run."""

pytest_plugins = ("perfsuite.plugin",)
