"""Corporates and consumers: the identities a programme's customers are."""
