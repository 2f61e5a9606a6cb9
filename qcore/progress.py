"""A text progress bar for the report: tensors done, elements per second, ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


def _clock(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _rate(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.2f} {unit}elem/s"
    return f"{v:.0f} elem/s"


class ProgressBar:
    """Callable as ``bar(tensors_done, tensors_total, elements_done, elements_total)``.

    On a terminal it redraws one line (at most 10 times a second); otherwise it prints a line
    every ``every`` seconds and at the end. ETA is by elements, not tensors.
    """

    def __init__(self, stream: TextIO | None = None, width: int = 30, every: float = 5.0,
                 label: str = "") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.every = every
        self.label = label
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.last = -1e9

    def line(self, done: int, total: int, el_done: int, el_total: int) -> str:
        elapsed = time.perf_counter() - self.t0
        frac = el_done / el_total if el_total else (done / total if total else 1.0)
        fill = int(round(frac * self.width))
        rate = el_done / elapsed if elapsed > 0 else 0.0
        eta = (el_total - el_done) / rate if rate > 0 else float("nan")
        bar = "#" * fill + "." * (self.width - fill)
        return (f"{self.label}[{bar}] {done}/{total} tensors  {_rate(rate)}  "
                f"elapsed {_clock(elapsed)}  ETA {_clock(eta if done < total else 0)}")

    def __call__(self, done: int, total: int, el_done: int, el_total: int) -> None:
        now = time.perf_counter()
        final = done >= total
        if not final and now - self.last < (0.1 if self.tty else self.every):
            return
        self.last = now
        text = self.line(done, total, el_done, el_total)
        if self.tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
