"""`python -m sparkfleet` runs the CLI."""

from .cli import main

main()
