"""Fees charged to identities and credited to the programme's revenue account."""
