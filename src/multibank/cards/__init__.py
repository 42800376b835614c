"""Managed cards (issue 34): prepaid and debit cards of an identity."""
