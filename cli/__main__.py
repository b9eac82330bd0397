"""``python -m cli`` runs the ``ikkai`` command, for machines where the console script is not on PATH."""

from cli import main

main()
