"""Cross-cutting building blocks with no domain knowledge."""
