"""multibank: a self-hostable Multi Product Banking Service server (3.29.1 and 3.1.0)."""

__version__ = "0.1.0"
