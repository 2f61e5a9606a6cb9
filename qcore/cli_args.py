"""What the command lines (``python -m qcore.model``, ``qcore.report``, ``qcore.bench``) share.

:class:`Parser` refuses a malformed command line in one ``error:`` line with exit status 2, as
every other refusal of these tools does (argparse's own refusal prints the usage block first).
:func:`is_count` is the one test behind every integer flag (a bool is not an integer), and
:func:`check_repeats` the one bound on timed passes, so that ``--latency-repeats`` (model tool)
and ``--repeats`` (bench) refuse the same values with the same sentence.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

import numpy as np

from .errors import QuantizationError

__all__ = ["MAX_REPEATS", "Parser", "check_repeats", "is_count"]

#: The most timed passes per model a run takes: the bound keeps a typo from timing for days.
MAX_REPEATS = 1000


class Parser(argparse.ArgumentParser):
    """An argument parser whose refusal is one line, ``error: MESSAGE (see --help)``, and exit
    status 2, like every other refusal of the command lines."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see --help)\n")


def is_count(value: Any, lo: int, hi: int | None = None) -> bool:
    """Whether ``value`` is an integer (a bool is not one) in ``lo``..``hi`` (no top when
    ``hi`` is None)."""
    return (not isinstance(value, bool) and isinstance(value, (int, np.integer))
            and lo <= value and (hi is None or value <= hi))


def check_repeats(flag: str, repeats: Any, note: str = "") -> int:
    """``flag``: timed passes per model, 1..:data:`MAX_REPEATS` (0 times nothing);
    QuantizationError otherwise, ``note`` appended to its sentence."""
    if not is_count(repeats, 1, MAX_REPEATS):
        raise QuantizationError(f"{flag} {repeats}: give 1 to {MAX_REPEATS} timed passes per "
                                f"model{note}")
    return int(repeats)
