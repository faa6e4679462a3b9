"""Run the command line: ``python -m apikey_tui``."""

from apikey_tui.cli import main

raise SystemExit(main())
