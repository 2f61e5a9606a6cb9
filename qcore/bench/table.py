"""The benchmark's table: the side-by-side rows as Markdown, and the run as a Markdown section
headed by the host, the versions, the date and the exact command (docs/performance.md)."""

from __future__ import annotations

import datetime
import os
import shlex

import ml_dtypes
import numpy as np

import qcore
from qcore.bench.cases import PEERS, Case, target_verdicts


def format_table(cases: list[Case], bandwidth: float) -> str:
    peers = [p for p in PEERS if any(p in c.results for c in cases)]
    others = sorted({k for c in cases for k in c.results if k.startswith("qcore[")})
    head = (["case", "qcore Gelem/s", "% roofline"] + [f"{k} Gelem/s" for k in others]
            + [f"{p} Gelem/s" for p in peers] + [f"qcore/{p}" for p in peers] + ["targets"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        q = c.results.get("qcore", 0.0)
        row = [c.name, f"{q / 1e9:.2f}", f"{100 * q / c.roofline:.0f}%" if c.roofline else ""]
        row += [f"{c.results[k] / 1e9:.2f}" if k in c.results else "—" for k in others]
        row += [f"{c.results[p] / 1e9:.3f}" if p in c.results else "—" for p in peers]
        row += [f"{q / c.results[p]:.1f}×" if p in c.results else "—" for p in peers]
        row.append("; ".join(target_verdicts(c, cases)) or "—")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(f"copy bandwidth (read + write): {bandwidth / 1e9:.1f} GB/s; roofline = "
                 f"bandwidth / bytes moved per element (float32 → 8-bit: 5 B)")
    return "\n".join(lines)


#: Environment variables that change the code a run compiles or how it runs (named in the
#: Markdown's command line when set).
_ENV_SHOWN = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_CACHE_DIR", "NUMBA_NUM_THREADS",
              "NUMBA_THREADING_LAYER")


def command_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The shell command that reproduces this run: the variables of _ENV_SHOWN that are set,
    then ``python -m qcore.bench`` and `argv` (a --markdown FILE argument included)."""
    env = os.environ if env is None else env
    prefix = [f"{k}={shlex.quote(env[k])}" if env[k] else f"{k}=" for k in _ENV_SHOWN
              if k in env]
    return " ".join(prefix + ["python -m qcore.bench"] + [shlex.quote(a) for a in argv])


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def markdown_report(table: str, info: dict, notes: list[str], command: str,
                    when: datetime.datetime | None = None) -> str:
    """The run as Markdown: a heading naming the host CPU (llvmlite's get_host_cpu_name()) and
    the code's vector ISA, then the date, the exact command, the host and versions, `notes`
    (the run's own header lines) and `table` (:func:`format_table`)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    compiled = info["numba_cpu_name"] or "native"
    lines = [f"### {info['host_cpu']} host, {compiled} code ({info['target_isa']})", "",
             f"- date: {when:%Y-%m-%d %H:%M} UTC",
             f"- command: `{command}`",
             f"- host: llvmlite `get_host_cpu_name()` = `{info['host_cpu']}` "
             f"({info['host_isa']}), {info['cores']} cores; numba {info['numba']} "
             f"({info['threading_layer']}, {info['threads']} threads), onnxruntime "
             f"{_version('onnxruntime')}, numpy {np.__version__}, ml_dtypes "
             f"{ml_dtypes.__version__}, qcore {qcore.__version__}"]
    lines += [f"- {n}" for n in notes]
    body, _, footer = table.partition("\n\n")
    lines += ["", body, ""]
    if footer:
        lines += [footer, ""]
    return "\n".join(lines)
