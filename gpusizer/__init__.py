"""gpusizer: which GPU to use, and how much of it."""

__version__ = "0.1.0"
