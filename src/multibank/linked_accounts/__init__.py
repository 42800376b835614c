"""Linked accounts (the 3.63 line, v3.63.md §4, D39): an identity's own accounts at other banks,
verified before they are used, and the verification runs that decide them."""
