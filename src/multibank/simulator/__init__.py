"""The sandbox simulator: its API of contract §8 and D8 under /simulate/api, and the sandbox
provider page at /kyc/{reference}. HTTP layer over the domain services (no domain slice imports
it)."""
