"""``python -m gpusizer`` runs the command-line tool."""

from gpusizer.cli import main

main()
