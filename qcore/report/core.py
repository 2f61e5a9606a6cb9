"""The whole-model report: every tensor of a checkpoint × every recipe, one tidy row each.

:func:`run_report` lists the model's tensors (headers only), filters them, and runs one *task*
per tensor — ``(file, tensor name, recipe names)``, never an array — either in this process or
on a Dask cluster (:mod:`qcore.report.distributed`). A task maps its tensor, widens it to
float32, computes its statistics and every recipe's round-trip metrics, and returns the rows;
the same function runs in both places, so the rows are identical bit for bit.

Rows are appended to a journal (``OUT.partial.csv``, floats written exactly, the run's identity
on its first line) as tensors finish; ``resume=True`` skips what the journal or a finished
output already holds for the same run (:mod:`qcore.report.identity`: another model, options or
qcore version is refused; a changed file is computed again). When the run completes the outputs
(``.csv`` / ``.parquet``, each with ``OUT.run.json``) are written and the journal removed.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import QuantizationError
from ..io import TensorFileError
from ..metrics import bits_sqnr_front
from ..paths import check_writable_file
from ..recipes import DEFAULT_RECIPES, parse_recipes
from .identity import (
    IDENTITY_PREFIX,
    identity_path,
    read_identity,
    refuse_or_accept,
    run_identity,
    usable_rows,
)
from .sources import TensorRef, list_tensors, onnx_quantized_nodes, resolve_files
from .tasks import COLUMNS, OPTIONAL_COLUMNS, Task, model_root, relative_file, run_task

__all__ = ["COLUMNS", "Report", "Task", "model_root", "read_rows", "run_report",
           "run_task", "select", "sqnr_matrix", "summarize", "tensor_labels", "write_rows"]

@dataclass
class Report:
    """What :func:`run_report` returns."""

    rows: pd.DataFrame
    recipes: list[str]
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (file, tensor, why)
    seconds: float = 0.0
    elements: int = 0  # elements processed in this run (times one; recipes not multiplied)
    resumed: int = 0  # tensors skipped because their rows were already there

    @property
    def errors(self) -> pd.DataFrame:
        """Rows whose tensor or recipe failed (their ``error`` says why)."""
        return self.rows[self.rows["error"] != ""]


# ---------------------------------------------------------------------------------------------
# selecting tensors


def quantized_files(model: str | os.PathLike) -> dict[str, dict[str, int]]:
    """The model's ``.onnx`` files that are already quantized -> their quantized nodes by
    operator; a file that cannot be read is left to :func:`list_tensors` to report."""
    out = {}
    for f in resolve_files(model):
        if f.suffix.lower() == ".onnx":
            try:
                counts = onnx_quantized_nodes(str(f))
            except Exception:  # noqa: BLE001 - unreadable: list_tensors gives its error row
                continue
            if counts:
                out[str(f)] = counts
    return out


def select(refs: Iterable[TensorRef], include: Sequence[str] = (), exclude: Sequence[str] = (),
           min_elements: int = 0) -> tuple[list[TensorRef], list[tuple[str, str, str]]]:
    """(tensors to report, skipped (file, tensor, why)). Patterns are shell globs on the name;
    a tensor is kept when it matches any ``include`` (or none is given) and no ``exclude``."""
    keep, skipped = [], []
    for ref in refs:
        if ref.error and ref.name == "*":
            keep.append(ref)  # an unreadable file: reported as an error row
            continue
        if include and not any(fnmatch.fnmatchcase(ref.name, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(ref.name, p) for p in exclude):
            continue
        if ref.error:
            keep.append(ref)  # a broken header entry: reported as an error row
        elif ref.quantized:
            skipped.append((ref.file, ref.name, f"read by a {ref.quantized} node: part of the "
                                                f"already-quantized model, not its float "
                                                f"remainder"))
        elif not ref.supported:
            skipped.append((ref.file, ref.name, f"dtype {ref.dtype} is not floating point"))
        elif ref.elements < min_elements:
            skipped.append((ref.file, ref.name, f"{ref.elements} elements < {min_elements}"))
        elif ref.elements == 0:
            skipped.append((ref.file, ref.name, "no elements"))
        else:
            keep.append(ref)
    return keep, skipped


# ---------------------------------------------------------------------------------------------
# rows on disk


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)  # shortest exact round trip ('nan', 'inf' included)
    return str(v)


def append_rows(path: Path, rows: Sequence[dict[str, Any]],
                identity: dict[str, Any] | None = None) -> None:
    """Append rows to a journal CSV (the run's identity line, when given, and the header first
    when the file is new); flushed to disk."""
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        if new:
            if identity is not None:
                fh.write(IDENTITY_PREFIX + json.dumps(identity, separators=(",", ":")) + "\n")
            w.writerow(list(COLUMNS))
        for row in rows:
            w.writerow([_fmt(row[k]) for k in COLUMNS])
        fh.flush()
        os.fsync(fh.fileno())


def _cast(kind: type, text: str) -> Any:
    if kind is float:
        return float(text) if text != "" else math.nan
    if kind is int:
        return int(text) if text != "" else 0
    return text


def read_rows(path: str | os.PathLike) -> pd.DataFrame:
    """Rows from a report file (.csv or .parquet) or a journal; a torn last line is dropped."""
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise TensorFileError(f"{p}: reading Parquet needs pyarrow "
                                  f"(pip install 'qcore[report]')") from None
        return _frame(pq.read_table(p).to_pylist())
    try:
        return _read_csv_rows(p)
    except UnicodeDecodeError:
        raise TensorFileError(f"{p}: not UTF-8 text; not a qcore report or journal") from None
    except csv.Error as exc:
        raise TensorFileError(f"{p}: not a readable CSV report ({exc})") from None
    except OSError as exc:
        raise TensorFileError(f"{p}: cannot be read ({exc.strerror})") from None


def _read_csv_rows(p: Path) -> pd.DataFrame:
    records = []
    with open(p, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header and header[0].startswith("#"):  # a journal's run identity
            header = next(reader, None)
        if header is None:
            return _frame([])
        missing = [c for c in COLUMNS if c not in header and c not in OPTIONAL_COLUMNS]
        if missing:
            raise TensorFileError(f"{p}: not a qcore report (missing columns "
                                  f"{', '.join(missing)})")
        idx = {c: header.index(c) for c in COLUMNS if c in header}
        for line in reader:
            if len(line) != len(header):
                continue  # interrupted while writing
            try:
                # an optional column the header lacks is filled in by _frame
                records.append({c: _cast(COLUMNS[c], line[i]) for c, i in idx.items()})
            except ValueError:
                continue
    return _frame(records)


def _frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a frame of :data:`COLUMNS`; a column a report written before it existed lacks
    (:data:`~qcore.report.tasks.OPTIONAL_COLUMNS`) takes the value it then meant."""
    records = [r if all(c in r for c in OPTIONAL_COLUMNS) else {**OPTIONAL_COLUMNS, **r}
               for r in records]
    df = pd.DataFrame.from_records(list(records), columns=list(COLUMNS))
    for c, k in COLUMNS.items():
        df[c] = df[c].astype({str: object, int: np.int64, float: np.float64}[k])
    return df.reset_index(drop=True)


def write_rows(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write rows as .csv (floats exact) or .parquet (pyarrow), atomically."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise QuantizationError(f"{p}: writing Parquet needs pyarrow "
                                    f"(pip install 'qcore[report]'); or write .csv") from None
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp)
    else:
        if tmp.exists():
            tmp.unlink()
        append_rows(tmp, df.to_dict("records"))
    os.replace(tmp, p)
    return p


def journal_path(out: str | os.PathLike) -> Path:
    p = Path(out)
    return p.with_name(p.name + ".partial.csv")


def check_out(out: str | os.PathLike) -> Path:
    """An output path the run can write, checked before anything is computed: a .csv or
    .parquet name, no null byte, not a folder, in an existing folder this process may write."""
    text = os.fspath(out)
    if "\x00" in text:
        raise QuantizationError(f"--out {text!r}: the path holds a null byte, which no file "
                                f"name can")
    p = Path(text)
    if p.suffix.lower() not in (".csv", ".parquet"):
        raise QuantizationError(f"--out {p}: the report is written as .csv or .parquet; give "
                                f"a name ending in one of them")
    return check_writable_file(p, f"--out {p}")


MAX_THREADS = 64


def check_options(*, workers: int = 0, threads: int = 1, min_elements: int = 0) -> None:
    """The run's numeric options, checked before anything is computed."""
    cores = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= cores:
        raise QuantizationError(f"--workers {workers}: must be 0 (no Dask) to {cores} (this "
                                f"machine's cores); more worker processes than cores only "
                                f"compete")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise QuantizationError(f"--threads {threads}: must be 1 to {MAX_THREADS} (tensors at a "
                                f"time; each holds a slice of its tensor)")
    if isinstance(min_elements, bool) or not isinstance(min_elements, int) or min_elements < 0:
        raise QuantizationError(f"--min-elements {min_elements}: must be an integer >= 0")


# ---------------------------------------------------------------------------------------------
# the run


ProgressFn = Callable[[int, int, int, int], None]  # tensors done, total, elements done, total


def run_report(model: str | os.PathLike, recipes: Sequence[str] | str = DEFAULT_RECIPES, *,
               out: Sequence[str | os.PathLike] | str | os.PathLike | None = None,
               resume: bool = False, include: Sequence[str] = (), exclude: Sequence[str] = (),
               min_elements: int = 0, workers: int = 0, scheduler: str | None = None,
               progress: ProgressFn | None = None, cluster_kwargs: dict | None = None,
               on_client: Callable[[Any], None] | None = None, threads: int = 1,
               fresh: bool = False) -> Report:
    """Run every recipe on every selected tensor of ``model``; see the module docstring.

    ``out``: one or more .csv / .parquet paths (the first also names the journal).
    ``workers > 0`` runs a Dask ``LocalCluster`` of that many single-threaded worker processes;
    ``scheduler`` connects to an existing Dask cluster. Neither: in this process, on
    ``threads`` threads, one tensor each at a time (the kernels release the GIL).
    """
    t0 = time.perf_counter()
    names = [r.name for r in parse_recipes(recipes)]
    outs = [out] if isinstance(out, (str, os.PathLike)) else list(out or [])
    outs = [check_out(o) for o in outs]
    check_options(workers=workers, threads=threads, min_elements=min_elements)
    if scheduler:
        from ..distributed import check_scheduler

        check_scheduler(scheduler)
    resolve_files(model)  # a clear error for a missing model before anything else
    root = model_root(model)
    refs, skipped = select(list_tensors(model), include, exclude, int(min_elements))

    ident = run_identity(model, root, names, list(include), list(exclude), int(min_elements))
    previous = _previous_rows(outs, resume, ident, fresh, names)
    done = _done_keys(previous, names)
    journal = journal_path(outs[0]) if outs else None
    if journal is not None:  # this run's journal: its identity and the saved rows it keeps
        tmp = journal.with_name(journal.name + ".tmp")
        if tmp.exists():
            tmp.unlink()
        append_rows(tmp, previous.to_dict("records"), identity=ident)
        os.replace(tmp, journal)

    tasks: list[Task] = []
    resumed = 0
    for ref in refs:
        todo = tuple(n for n in names if (relative_file(ref.file, root), ref.name, n) not in done)
        if not todo:
            resumed += 1
            continue
        tasks.append(Task(ref.file, ref.name, todo, root, ref.elements))

    new_rows: list[dict[str, Any]] = []
    total_el = sum(t.elements for t in tasks)
    state = {"tensors": 0, "elements": 0}

    def on_rows(task: Task, rows: list[dict[str, Any]]) -> None:
        new_rows.extend(rows)
        if journal is not None:
            append_rows(journal, rows)
        state["tensors"] += 1
        state["elements"] += task.elements
        if progress is not None:
            progress(state["tensors"], len(tasks), state["elements"], total_el)

    if progress is not None:
        progress(0, len(tasks), 0, total_el)
    if workers or scheduler:
        from .distributed import run_tasks

        run_tasks(tasks, on_rows, workers=workers, scheduler=scheduler,
                  cluster_kwargs=cluster_kwargs, on_client=on_client)
    elif threads > 1 and len(tasks) > 1:
        with ThreadPoolExecutor(min(threads, len(tasks)), "qcore-report") as pool:
            running = {pool.submit(run_task, task): task for task in tasks}
            try:
                for done in as_completed(running):  # rows land on this thread as they come
                    on_rows(running[done], done.result())
            except BaseException:
                for future in running:
                    future.cancel()
                raise
    else:
        for task in tasks:
            on_rows(task, run_task(task))

    rows = _merge_rows(previous, new_rows, refs, names, root)
    for o in outs:
        write_rows(rows, o)
        identity_path(o).write_text(json.dumps(ident, indent=1), encoding="utf-8")
    if journal is not None and journal.exists():
        journal.unlink()
    return Report(rows, names, [(relative_file(f, root), n, w) for f, n, w in skipped],
                  time.perf_counter() - t0, total_el, resumed)


def _previous_rows(outs: list[Path], resume: bool, ident: dict[str, Any], fresh: bool,
                   names: Sequence[str]) -> pd.DataFrame:
    """Saved rows this run may keep: the journal's (else the finished output's), when they are
    of this run (:mod:`qcore.report.identity`), for the recipes asked, of unchanged files."""
    if not resume or not outs:
        return _frame([])
    journal, out = journal_path(outs[0]), outs[0]
    where = journal if journal.exists() else out
    if not where.exists():
        return _frame([])
    previous = read_rows(where)
    saved = read_identity(journal, out)
    if not refuse_or_accept(saved, ident, where, len(previous) > 0, fresh):
        return _frame([])
    return usable_rows(previous, saved, ident, list(names))


def _done_keys(previous: pd.DataFrame, names: Sequence[str]) -> set[tuple[str, str, str]]:
    ok = previous[(previous["error"] == "") & previous["recipe"].isin(list(names))]
    return set(zip(ok["file"], ok["tensor"], ok["recipe"]))


def _merge_rows(previous: pd.DataFrame, new_rows: list[dict[str, Any]], refs: list[TensorRef],
                names: Sequence[str], root: str) -> pd.DataFrame:
    """Previous and new rows in model order (tensor order, then recipe order), one row per
    (file, tensor, recipe): the newest wins, so a retried error row is replaced."""
    df = pd.concat([previous, _frame(new_rows)], ignore_index=True)
    if df.empty:
        return _frame([])
    df = df.drop_duplicates(subset=["file", "tensor", "recipe"], keep="last")
    order = {(relative_file(r.file, root), r.name): i for i, r in enumerate(refs)}
    rorder = {n: i for i, n in enumerate(names)}
    key_t = [order.get((f, t), len(order)) for f, t in zip(df["file"], df["tensor"])]
    key_r = [rorder.get(r, len(rorder)) for r in df["recipe"]]
    df = df.assign(_t=key_t, _r=key_r).sort_values(["_t", "_r"], kind="stable")
    return _frame(df.drop(columns=["_t", "_r"]).to_dict("records"))


# ---------------------------------------------------------------------------------------------
# the summary


def summarize(rows: pd.DataFrame, top: int = 10) -> dict[str, Any]:
    """Per recipe: tensors, elements, total bytes, bits per element (every tensor's stored bits,
    :func:`qcore.metrics.bits_per_element`, over all elements), element-weighted SQNR and
    the model-level SQNR; the ``top`` worst tensors per recipe (lowest SQNR)."""
    ok = rows[rows["error"] == ""]
    per: list[dict[str, Any]] = []
    worst: dict[str, pd.DataFrame] = {}
    for recipe, g in ok.groupby("recipe", sort=False):
        el = g["elements"].astype(np.float64)
        sq = g["sqnr_db"]
        finite = np.isfinite(sq)
        w = el[finite]
        weighted = float((sq[finite] * w).sum() / w.sum()) if w.sum() else math.nan
        # model-level SQNR: total signal over total noise (rmse^2 * n is each tensor's SSE)
        sse = (g["rmse"] ** 2 * el).sum()
        sig = (g["rmse"] ** 2 * el * 10 ** (g["sqnr_db"] / 10))[finite].sum()
        model_sqnr = 10 * math.log10(sig / sse) if sse > 0 and sig > 0 else math.nan
        per.append({"recipe": recipe, "tensors": int(len(g)), "elements": int(el.sum()),
                    "bytes": int(g["bytes"].sum()),
                    "bits_per_element": float((g["bits_per_element"] * el).sum() / el.sum()),
                    "sqnr_db_weighted": weighted, "sqnr_db_model": model_sqnr,
                    "min_sqnr_db": float(sq.min())})
        worst[str(recipe)] = g.nsmallest(top, "sqnr_db")[
            ["tensor", "shape", "sqnr_db", "clipped_fraction", "bits_per_element"]]
    table = pd.DataFrame(per, columns=["recipe", "tensors", "elements", "bytes",
                                       "bits_per_element", "sqnr_db_weighted", "sqnr_db_model",
                                       "min_sqnr_db"])
    table["pareto"] = bits_sqnr_front(table["bits_per_element"], table["sqnr_db_weighted"])
    return {"recipes": table, "worst": worst,
            "errors": rows[rows["error"] != ""][["file", "tensor", "recipe", "error"]]}



def sqnr_matrix(rows: pd.DataFrame, value: str = "sqnr_db") -> pd.DataFrame:
    """tensors (rows, model order) × recipes (columns, run order) of one metric."""
    ok = rows.assign(label=tensor_labels(rows))
    m = ok.pivot_table(index="label", columns="recipe", values=value, aggfunc="first",
                       sort=False)
    return m.reindex(index=list(dict.fromkeys(ok["label"])),
                     columns=list(dict.fromkeys(ok["recipe"])))


def tensor_labels(rows: pd.DataFrame) -> list[str]:
    """A readable unique name per row's tensor: the tensor name, or file:tensor where names
    repeat across files (a folder of .npz files each holding ``x`` gives the file stems)."""
    names = rows[["file", "tensor"]].drop_duplicates()
    dup = set(names["tensor"][names["tensor"].duplicated()])
    out = []
    for f, t in zip(rows["file"], rows["tensor"]):
        if t not in dup:
            out.append(t)
        else:
            stem = Path(f).with_suffix("").as_posix()
            out.append(stem if t in ("x", "*") else f"{stem}:{t}")
    return out
