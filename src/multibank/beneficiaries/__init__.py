"""Trusted beneficiaries (the 3.63 line, v3.63.md §2, D38): payees an identity confirmed once
with SCA, in batches, whom its sends and wire transfers then pay without a challenge."""
