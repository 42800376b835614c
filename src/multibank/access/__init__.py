"""Logins, sessions and passwords."""
