"""The operator API under /portal/api (D4), authenticated by the admin bearer token."""
