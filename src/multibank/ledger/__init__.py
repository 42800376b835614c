"""The double-entry ledger: every movement of money, and the balances it leaves (D5)."""
