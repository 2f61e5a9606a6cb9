"""``python -m qcore.bench``: see :mod:`qcore.bench.cli`."""

from qcore.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
