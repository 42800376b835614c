"""`python -m multibank` is the same as the `multibank` command."""

from multibank.cli import main

main()
