"""Managed accounts: the instruments that hold an identity's money."""
