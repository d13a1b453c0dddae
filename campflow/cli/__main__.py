"""`python -m campflow.cli`: the command line (e.g. under `accelerate launch -m campflow.cli ...`)."""

from campflow.cli import main

main()
