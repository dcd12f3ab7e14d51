"""``python -m gpusizer`` runs the command-line tool."""

from gpusizer.cli.root import main

main()
