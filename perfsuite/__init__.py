"""perfsuite: a performance-regression and correctness suite for attention in PyTorch."""

__version__ = "0.1.0"
