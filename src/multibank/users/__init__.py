"""Root and authorised users: the people who log in on behalf of an identity."""
