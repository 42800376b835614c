"""HTTP adapters: one FastAPI application per interface version over one domain core."""
