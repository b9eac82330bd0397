"""``python -m ikkai`` runs the CLI, for machines where the console script is not on PATH."""

from deploy.cli import main

main()
