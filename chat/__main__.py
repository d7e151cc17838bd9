"""`python -m chat` runs the same entry point as the `chat` command."""

from chat.cli.main import main

raise SystemExit(main())
