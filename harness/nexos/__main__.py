"""Allow `python -m nexos ...`."""

from nexos.cli import main

main()
