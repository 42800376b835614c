"""Helpers for client projects' own test suites: the pytest plugin (`pytest_plugin`), which
pytest loads through the `pytest11` entry point. Nothing in the server imports this package."""
