"""``python -m memcore``: the same as the ``memcore`` command."""

from memcore.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
