"""``python -m qcore.model``: parse (:mod:`qcore.model.cli`), check and call
(:mod:`qcore.model.command`); every refusal one ``error:`` line and exit status 2."""

from __future__ import annotations

import sys

from ..errors import QuantizationError
from .cli import parser
from .command import run

__all__ = ["main"]


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """The command line: exit 0 done; 2 a refusal (one ``error:`` line on stderr); 130
    interrupted. A failure no check names (onnx, onnxruntime, NumPy, a file) is one line too."""
    args = parser().parse_args(argv)
    try:
        return run(args, sys.stdout)
    except (QuantizationError, ImportError) as exc:
        print(f"error: {_line(exc)}", file=sys.stderr)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or _line(exc)}{where}", file=sys.stderr)
    except MemoryError:
        print("error: out of memory; give fewer sentences, a smaller --dim or smaller inputs",
              file=sys.stderr)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, never a traceback
        print(f"error: unexpected {type(exc).__name__}: {_line(exc)} (a case qcore.model does "
              f"not check yet; please report it)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
