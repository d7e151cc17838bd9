"""`python -m chat.bench`: see chat.bench.run."""

from chat.bench.run import main

raise SystemExit(main())
