"""`python -m sparkfleet.cli` runs the CLI (used by tests to run it as a separate process)."""

from . import main

main()
