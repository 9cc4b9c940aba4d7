"""``python -m subscriptions``: the ``subs`` command line."""

from subscriptions.cli import main

main()
