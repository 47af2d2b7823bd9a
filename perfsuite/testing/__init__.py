"""Hypothesis strategies and property checks, for perfsuite's tests and users' own."""
