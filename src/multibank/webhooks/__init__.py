"""Webhooks (D16): signed events, recorded with the change that caused them, delivered after."""
