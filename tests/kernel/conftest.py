"""Fixtures of the kernel's tests."""
