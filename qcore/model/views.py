"""What a user adds to the measures: slices of an output named as outputs of their own
(``--slice``) and their own metric on the outputs (``--metric``, with a floor ``--min-metric``).

A detector's one output may hold box coordinates (hundreds of pixels) beside class scores
(below 0.05): its SQNR is the boxes'. ``--slice scores=out:2:4:84`` names elements 4 to 83 of
``out`` along axis 2 as an output ``scores`` with its own figure (SQNR and max |Δ|, or
agreement for a decision); a slice enters the model figure only where ``--outputs`` names it,
so the default figure still averages the model's own outputs once each.

``--metric MODULE:FUNCTION`` names a Python function ``f(reference, quantized) -> number``
(higher is better: a task's accuracy); both arguments are lists of the model's outputs as
NumPy arrays in the graph's order, the float model's and the quantized model's. Its value is
every measure's ``metric``; ``--min-metric X`` is a floor the plan keeps (refinement accepts
no plan below it while one above it is known).

Every bad value is a :class:`~qcore.errors.QuantizationError` naming the flag: the syntax and
the import before the model is loaded (:func:`parse_slices`, :func:`load_metric`), the outputs,
axes and ranges against the float outputs (:meth:`Views.check`), and a metric that raises or
returns no finite number on the float outputs, before any long work.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import QuantizationError

__all__ = ["OutputSlice", "Views", "load_metric", "parse_slices"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_SYNTAX = "NAME=OUTPUT:AXIS:START:STOP[,...] (e.g. scores=out:2:4:84)"


@dataclass(frozen=True)
class OutputSlice:
    """Elements ``start`` to ``stop - 1`` of output ``output`` along ``axis``, named ``name``."""

    name: str
    output: str
    axis: int
    start: int
    stop: int

    def take(self, y: Any) -> np.ndarray:
        a = np.asarray(y)
        index = [slice(None)] * a.ndim
        index[self.axis] = slice(self.start, self.stop)
        return a[tuple(index)]

    def __str__(self) -> str:
        return f"{self.name}={self.output}:{self.axis}:{self.start}:{self.stop}"


def parse_slices(text: str | None) -> list[OutputSlice]:
    """``--slice`` parsed: ``NAME=OUTPUT:AXIS:START:STOP`` items, comma-separated (OUTPUT may
    hold colons: the last three fields are the numbers); NAME a new identifier, each once;
    0 <= START < STOP. The outputs and their shapes are checked later (:meth:`Views.check`)."""
    if text is None:
        return []
    out: list[OutputSlice] = []
    items = [s.strip() for s in str(text).split(",")]
    if not any(items):
        raise QuantizationError(f"--slice {text!r}: give {_SYNTAX}")
    for item in items:
        name, eq, rest = item.partition("=")
        parts = rest.rsplit(":", 3)
        if not eq or len(parts) != 4 or not parts[0]:
            raise QuantizationError(f"--slice {item!r}: give {_SYNTAX}")
        name = name.strip()
        if not _NAME.match(name):
            raise QuantizationError(f"--slice {item!r}: the name {name!r} must be a letter or _ "
                                    f"then letters, digits, _ . or -")
        try:
            axis, start, stop = (int(p) for p in parts[1:])
        except ValueError:
            raise QuantizationError(f"--slice {item!r}: AXIS, START and STOP must be integers; "
                                    f"give {_SYNTAX}") from None
        if not 0 <= start < stop:
            raise QuantizationError(f"--slice {item!r}: give 0 <= START < STOP (elements START "
                                    f"to STOP - 1)")
        if any(s.name == name for s in out):
            raise QuantizationError(f"--slice: the name {name!r} is given twice")
        out.append(OutputSlice(name, parts[0], axis, start, stop))
    return out


def load_metric(spec: str) -> Callable[..., Any]:
    """``--metric MODULE:FUNCTION``: the function, imported (from ``sys.path``, the current
    folder first when run as ``python -m``); refused when the module does not import or has
    no such callable."""
    mod_name, colon, fn_name = str(spec).partition(":")
    if not colon or not mod_name or not fn_name or ":" in fn_name:
        raise QuantizationError(f"--metric {spec!r}: give MODULE:FUNCTION (a Python module on "
                                f"sys.path and a function f(reference, quantized) -> number)")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any failure of a user's import is one line
        raise QuantizationError(f"--metric {spec}: the module {mod_name!r} does not import "
                                f"({type(exc).__name__}: {_first_line(exc)})") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise QuantizationError(f"--metric {spec}: the module {mod_name!r} has no function "
                                f"{fn_name!r}")
    return fn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Views:
    """The slices and the metric one case measures (:func:`qcore.model.fidelity.compare`)."""

    slices: Sequence[OutputSlice] = ()
    metric: Callable[..., Any] | None = None
    metric_name: str = ""
    checked: bool = field(default=False, repr=False)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slices]

    def check(self, names: Sequence[str], reference: Sequence[Any]) -> None:
        """The slices against the model's outputs ``names`` and their float values: the output
        exists, the name is new, the axis is one of its axes, STOP within its length; the
        metric returns a finite number on (reference, reference)."""
        names = list(names)
        for s in self.slices:
            if s.name in names:
                raise QuantizationError(f"--slice {s}: {s.name!r} is already an output of the "
                                        f"model; give the slice a new name")
            if s.output not in names:
                raise QuantizationError(f"--slice {s}: {s.output!r} is not an output of the "
                                        f"model; its outputs: {', '.join(names)}")
            shape = np.shape(reference[names.index(s.output)])
            if not -len(shape) <= s.axis < len(shape):
                raise QuantizationError(f"--slice {s}: {s.output!r} has {len(shape)} axes "
                                        f"(shape {list(shape)}); AXIS must be in "
                                        f"[{-len(shape)}, {len(shape) - 1}]")
            if s.stop > shape[s.axis]:
                raise QuantizationError(f"--slice {s}: axis {s.axis} of {s.output!r} has "
                                        f"{shape[s.axis]} elements (shape {list(shape)}); STOP "
                                        f"must be <= {shape[s.axis]}")
        if self.metric is not None:
            self.score(reference, reference, "the float outputs (reference, reference)")
        self.checked = True

    def extend(self, names: Sequence[str], ref: Sequence[Any], out: Sequence[Any]
               ) -> tuple[list[str], list[Any], list[Any]]:
        """``names``, ``ref`` and ``out`` with each slice appended as an output of its own."""
        names, ref, out = list(names), list(ref), list(out)
        base = list(names)
        for s in self.slices:
            if s.output in base:
                i = base.index(s.output)
                names.append(s.name)
                ref.append(s.take(ref[i]))
                out.append(s.take(out[i]) if i < len(out) else s.take(ref[i]))
        return names, ref, out

    def score(self, ref: Sequence[Any], out: Sequence[Any], what: str = "the quantized "
              "outputs") -> float:
        """The metric of (ref, out) as a float; refused when it raises or is not finite."""
        try:
            v = self.metric([np.asarray(r) for r in ref], [np.asarray(o) for o in out])
        except Exception as exc:  # noqa: BLE001 - a user's function: one line, never a traceback
            raise QuantizationError(f"--metric {self.metric_name}: raised "
                                    f"{type(exc).__name__} on {what}: {_first_line(exc)}"
                                    ) from None
        try:
            value = float(np.asarray(v, dtype=np.float64).item()) if np.size(v) == 1 else None
        except (TypeError, ValueError):
            value = None
        if value is None or not math.isfinite(value):
            raise QuantizationError(f"--metric {self.metric_name}: returned {v!r:.60} on "
                                    f"{what}; it must return one finite number (higher is "
                                    f"better)")
        return value


# ------------------------------------------------------------------------- the command line


#: The flags, their metavars and help, in --help's order.
FLAGS = (
    ("--slice", {"metavar": "NAME=OUTPUT:AXIS:START:STOP[,...]",
                 "help": "name elements START..STOP-1 of OUTPUT along AXIS as an output of its "
                         "own, with its own figure (a detector's class scores apart from its "
                         "boxes); in the model figure only where --outputs names it"}),
    ("--metric", {"metavar": "MODULE:FUNCTION",
                  "help": "your function f(reference, quantized) -> number (higher is better) "
                          "of the float and the quantized model's outputs (lists of arrays, "
                          "graph order), reported beside the SQNR"}),
    ("--min-metric", {"type": float, "metavar": "X",
                      "help": "with --metric and --budget: the plan keeps the metric >= X "
                              "(refined on measured runs where it does not; 'not met' and exit "
                              "status 1 where no plan found does)"}),
)


def add_arguments(group: Any) -> None:
    """``--slice``, ``--metric`` and ``--min-metric`` on ``group`` (a parser or a group)."""
    for flag, options in FLAGS:
        group.add_argument(flag, **options)


def views_from_args(args: Any) -> Views | None:
    """The :class:`Views` the flags name, or None; every value and combination checked before
    the model is loaded (QuantizationError naming the flag)."""
    slices = parse_slices(getattr(args, "slice", None))
    spec = getattr(args, "metric", None)
    floor = getattr(args, "min_metric", None)
    if floor is not None:
        if spec is None:
            raise QuantizationError(f"--min-metric {floor}: a floor on --metric; give "
                                    f"--metric MODULE:FUNCTION or leave --min-metric out")
        if not math.isfinite(floor):
            raise QuantizationError(f"--min-metric {floor}: give a finite number")
        if getattr(args, "budget", None) is None:
            raise QuantizationError("--min-metric acts on a plan: give --budget BITS (bits per "
                                    "weight) or leave --min-metric out")
    if not slices and spec is None:
        return None
    flags = " and ".join(f for f, v in (("--slice", slices), ("--metric", spec)) if v)
    for other, given in (("--workers", getattr(args, "workers", 0)),
                         ("--scheduler", getattr(args, "scheduler", None)),
                         ("--feedback", getattr(args, "feedback", None)),
                         ("--min-sqnr", getattr(args, "min_sqnr", None) is not None),
                         ("--max-latency", getattr(args, "max_latency", None) is not None)):
        if given:
            raise QuantizationError(f"{flags}: not measured with {other} (its runs measure the "
                                    f"model's own outputs by SQNR); leave one of them out")
    metric = load_metric(spec) if spec is not None else None
    return Views(tuple(slices), metric, spec or "")
