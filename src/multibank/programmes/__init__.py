"""Programmes (tenants): API keys, settings, profiles and fee types, managed by the operator."""
