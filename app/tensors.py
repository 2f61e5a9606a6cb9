"""The tensor every page works on: synthetic, a shipped dataset tensor, or an upload.

The choice lives in the sidebar (and the URL) and is shared by every page. A tensor is named by
a small hashable :class:`TensorSpec`; :func:`load` turns a spec into a read-only float array,
cached without copies (``st.cache_resource``), so the cached computations in
:mod:`app.compute` take the spec, not millions of numbers, as their key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import streamlit as st

import qcore
from qcore import datasets, io, synthetic

from . import errors, explain, frame, state, widgets

MAX_ELEMENTS = 16 * 2**20  # 16 Mi elements (4096 x 4096)
SOURCES = ("synthetic", "dataset", "upload")
SOURCE_LABELS = {"synthetic": "Synthetic", "dataset": "Real tensor", "upload": "Upload"}
X_TYPES = ("float", "float16", "bfloat16")
X_TYPE_LABELS = {"float": "float32", "float16": "float16", "bfloat16": "bfloat16"}
DIST_LABELS = {"normal": "normal", "laplace": "Laplace", "uniform": "uniform",
               "student_t": "Student-t", "lognormal": "log-normal", "bimodal": "bimodal",
               "outliers": "normal + outliers", "sparse": "sparse",
               "outlier_channel": "one outlier channel (row)"}
UPLOAD_TYPES = ["npy", "npz", "safetensors", "onnx", "csv"]
_LAST_UPLOAD = "_qx_last_upload"  # (key, label) of the upload in use, kept across pages


@dataclass(frozen=True)
class TensorSpec:
    """What tensor to use; hashable, small, the key of every cached computation."""

    source: str = "synthetic"
    distribution: str = "normal"
    rows: int = 1024
    cols: int = 1024
    seed: int = 0
    dataset: str = ""
    upload: str = ""  # content digest + tensor name of an upload
    x_type: str = "float"

    @property
    def label(self) -> str:
        if self.source == "dataset":
            return self.dataset
        if self.source == "upload":
            return self.upload.split("|", 1)[-1]
        return f"{DIST_LABELS.get(self.distribution, self.distribution)} {self.rows}×{self.cols}"


@st.cache_resource(max_entries=8, show_spinner=False)
def _uploads() -> dict[str, np.ndarray]:
    """Uploaded tensors by digest|name (kept for the server's lifetime, a few at most)."""
    return {}


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _as_x_type(a: np.ndarray, x_type: str) -> np.ndarray:
    dtype = qcore.get_format(x_type).dtype
    if a.dtype == dtype:
        return a
    with np.errstate(all="ignore"):
        if a.dtype.kind not in "fiub" and a.dtype not in (ml_dtypes.bfloat16,):
            a = a.astype(np.float32)
        return a.astype(dtype)


@st.cache_resource(max_entries=6, show_spinner="Preparing the tensor…")
def load(spec: TensorSpec) -> np.ndarray:
    """The tensor of a spec in the spec's input type (read-only; shared, never copied)."""
    if spec.source == "synthetic":
        if spec.rows * spec.cols > MAX_ELEMENTS:
            raise qcore.QuantizationError(
                f"{spec.rows} × {spec.cols} = {spec.rows * spec.cols:,} elements is more than "
                f"the app's limit of {MAX_ELEMENTS:,} (16 Mi, e.g. 4096 × 4096)")
        a = synthetic.generate(spec.distribution, (spec.rows, spec.cols), seed=spec.seed)
    elif spec.source == "dataset":
        a = datasets.load(spec.dataset)
    else:
        store = _uploads()
        if spec.upload not in store:
            raise qcore.QuantizationError(
                "the uploaded tensor is no longer in memory (uploads are not part of a shared "
                "link); upload the file again")
        a = store[spec.upload]
    return _readonly(_as_x_type(np.asarray(a), spec.x_type))


def as_float32(x: np.ndarray) -> np.ndarray:
    """x as float32 for statistics and plots (float16/bfloat16 widen exactly)."""
    return x if x.dtype == np.float32 else x.astype(np.float32)


@st.cache_resource(max_entries=2, show_spinner=False)
def _upload_file(digest: str, filename: str, _data: bytes) -> io.TensorFile:
    """An upload read and indexed once (a .csv parsed once), tensors over the limit refused
    before their data is built; keyed by the content digest."""
    return io.TensorFile(_data, filename=filename, max_elements=MAX_ELEMENTS)


def _kept_upload() -> tuple[str, str] | None:
    """The upload chosen earlier in this session, while the server still holds it."""
    kept = st.session_state.get(_LAST_UPLOAD)
    return kept if kept and kept[0] in _uploads() else None


def _upload(where) -> str:
    """Upload widget; returns the key of the chosen uploaded tensor ('' when none).

    Streamlit's uploader belongs to one page: on another page it starts empty. The tensor
    chosen last is kept (the session remembers its key), so every page goes on using it until
    another file is uploaded or the file is removed from the uploader it was uploaded with."""
    f = where.file_uploader("Tensor file", type=UPLOAD_TYPES, key="upload_file",
                            help=".npy / .npz / .safetensors / .onnx (an initializer) / .csv; "
                                 "never unpickled; at most 256 MiB and 16 Mi elements.")
    removed = f is None and state.on_screen_before("upload_file") \
        and st.session_state.get("_qx_upload_shown")
    state.mark_drawn("upload_file")
    st.session_state["_qx_upload_shown"] = f is not None
    if f is None:
        kept = None if removed else _kept_upload()
        if kept is None:
            st.session_state.pop(_LAST_UPLOAD, None)
            where.info("Upload a .npy, .npz, .safetensors, .onnx or .csv file.",
                       icon=":material/upload:")
            st.info("No tensor yet: choose a file under **Tensor file** in the sidebar (.npy, "
                    ".npz, .safetensors, .onnx or .csv), or pick a synthetic or shipped tensor "
                    "as the source.", icon=":material/upload_file:")
            return ""
        where.caption(f"Using **{kept[1]}**, uploaded earlier in this session. Upload another "
                      "file to replace it.")
        return kept[0]
    data = f.getvalue()
    digest = hashlib.sha1(data).hexdigest()[:16]
    try:
        upload = _upload_file(digest, f.name, data)
        entries = upload.list()
    except qcore.QuantizationError as exc:
        where.error(str(exc))
        return ""
    numeric = [e for e in entries if e[2] not in ("object", "str", "bool")] or entries
    names = [e[0] for e in numeric]
    name = names[0]
    if len(names) > 1:
        shapes = {e[0]: e for e in numeric}
        name = where.selectbox(
            "Tensor in the file", names, key="upload_tensor",
            format_func=lambda n: f"{n}  {tuple(shapes[n][1])} {shapes[n][2]}")
    key = f"{digest}|{name}"
    store = _uploads()
    if key not in store:
        try:
            a = upload.load(name)
        except qcore.QuantizationError as exc:
            where.error(str(exc))
            return ""
        if a.size > MAX_ELEMENTS:
            where.error(f"{name} has {a.size:,} elements; the app handles at most "
                        f"{MAX_ELEMENTS:,} (16 Mi). Slice it before uploading.")
            return ""
        if len(store) >= 4:
            store.pop(next(iter(store)))
        store[key] = _readonly(np.asarray(a))
    label = f.name if len(names) == 1 else f"{f.name} → {name}"
    st.session_state[_LAST_UPLOAD] = (key, label)
    return key


def conversion_note(spec: TensorSpec, x: np.ndarray) -> str:
    """What happened to an uploaded tensor's type on the way to x ('' when nothing)."""
    if spec.source != "upload":
        return ""
    raw = _uploads().get(spec.upload)
    if raw is None or raw.dtype == x.dtype:
        return ""
    target = X_TYPE_LABELS.get(spec.x_type, spec.x_type)
    if raw.dtype.kind == "f" or raw.dtype == ml_dtypes.bfloat16:
        how = (f"exact: {target} holds every {raw.dtype} value" if _widens(raw.dtype, x.dtype)
               else f"each value rounded to the nearest {target}")
    elif raw.dtype.kind in "iub":
        how = f"integers converted to {target}; exact up to the type's integer precision"
    else:
        how = f"converted to {target}"
    return f"The upload is **{raw.dtype}**; it is used as {target} ({how})."


def _widens(src: np.dtype, dst: np.dtype) -> bool:
    """Whether every value of float type ``src`` is a value of float type ``dst``."""
    a, b = ml_dtypes.finfo(src), ml_dtypes.finfo(dst)
    return b.nmant >= a.nmant and b.maxexp >= a.maxexp and b.minexp <= a.minexp


def _dataset_label(name: str) -> str:
    info = _dataset_infos().get(name, {})
    shape = "×".join(str(d) for d in info.get("shape", []))
    return f"{name}  ·  {info.get('kind', '')} {shape}"


@st.cache_data(show_spinner=False)
def _dataset_infos() -> dict[str, dict]:
    try:
        return {e["name"]: e for e in datasets.list()}
    except qcore.QuantizationError:
        return {}


def _datasets_problem() -> str:
    """Why no shipped tensor can be listed (qcore's message, which names where it looked)."""
    try:
        datasets.list()
    except qcore.QuantizationError as exc:
        return str(exc)
    return "the manifest lists none."


def picker(where=None) -> TensorSpec | None:
    """The sidebar's tensor section; returns the chosen spec (None: nothing usable yet)."""
    where = where if where is not None else st.sidebar
    where.subheader("Tensor", divider="gray")
    source = widgets.select("Source", SOURCES, "src", "synthetic", where=where, kind="segmented",
                            format_func=SOURCE_LABELS.get)
    x_type = widgets.select("Input type of x", X_TYPES, "xtype", "float", where=where,
                            kind="segmented", format_func=X_TYPE_LABELS.get,
                            help="The element type of x fed to QuantizeLinear. float16 and "
                                 "bfloat16 inputs are accepted from QuantizeLinear-19.")
    if source == "synthetic":
        dist = widgets.select("Distribution", synthetic.DISTRIBUTIONS, "dist", "normal",
                              where=where, format_func=DIST_LABELS.get)
        where.caption(synthetic.describe(dist))
        c1, c2 = where.columns(2)
        rows = widgets.number("Rows", "rows", 1024, min_value=1, max_value=MAX_ELEMENTS,
                              where=c1)
        cols = widgets.number("Columns", "cols", 1024, min_value=1, max_value=MAX_ELEMENTS,
                              where=c2)
        seed = widgets.number("Seed", "seed", 0, min_value=0, max_value=2**31 - 1, where=where)
        if rows * cols > MAX_ELEMENTS:
            where.error(f"{rows:,} × {cols:,} = {rows * cols:,} elements; the limit is "
                        f"{MAX_ELEMENTS:,} (16 Mi, e.g. 4096 × 4096).")
            return None
        return TensorSpec("synthetic", dist, int(rows), int(cols), int(seed), x_type=x_type)
    if source == "dataset":
        names = list(_dataset_infos())
        if not names:
            where.error("No dataset tensors found: " + _datasets_problem())
            return None
        name = widgets.select("Tensor", names, "ds", names[0], where=where,
                              format_func=_dataset_label)
        info = _dataset_infos()[name]
        stats = info.get("statistics", {})
        where.caption(f"{info.get('how', '')}  \nSource: {info.get('source', '')} "
                      f"({info.get('license', '')}).  \nrange [{stats.get('min', 0):.3g}, "
                      f"{stats.get('max', 0):.3g}], std {stats.get('std', 0):.3g}")
        return TensorSpec("dataset", dataset=name, x_type=x_type)
    key = _upload(where)
    if not key:
        return None
    return TensorSpec("upload", upload=key, x_type=x_type)


def open_page(title: str, intro: str, exact: str, *,
              show_type: bool = False) -> tuple[TensorSpec, np.ndarray]:
    """The opening every page about the sidebar's tensor shares, and so its first line: the
    frame (:func:`app.frame.enter`), the title, the tensor, and the intro in plain words with
    the exact semantics one expander away."""
    frame.enter()
    st.title(title)
    spec, x = page_tensor(show_type)
    explain.intro(intro, exact)
    return spec, x


def page_tensor(show_type: bool = False) -> tuple[TensorSpec, np.ndarray]:
    """The sidebar's tensor for a page: pick it, load it (errors shown), caption it."""
    spec = picker()
    if spec is None:
        frame.stop_page()
    x = errors.require(load, spec, what="Loading the tensor")
    caption = (f"Tensor **{spec.label}** · shape {' × '.join(map(str, x.shape))} · "
               f"{x.size:,} elements")
    if show_type:
        caption += f" · {X_TYPE_LABELS.get(spec.x_type, spec.x_type)}"
    note = conversion_note(spec, x)
    st.caption(caption + (f"  \n{note}" if note else ""))
    warn_no_finite(x)
    return spec, x


def input_non_finite(x: np.ndarray) -> tuple[int, int]:
    """(NaN count, ±Inf count) of a tensor's own elements (0, 0 for integer tensors)."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating) and x.dtype.kind != "V":
        try:
            x = x.astype(np.float32)
        except (TypeError, ValueError):
            return 0, 0
    return int(np.isnan(x).sum()), int(np.isinf(x).sum())


def warn_no_finite(x: np.ndarray) -> None:
    """Say so when no element of the tensor is finite: every error figure is then empty (no
    element has a finite x and x̂), and the sweeps have nothing to measure."""
    nan_in, inf_in = input_non_finite(x)
    if x.size and nan_in + inf_in == x.size:
        st.warning(f"This tensor has no finite element ({nan_in:,} NaN, {inf_in:,} ±Inf): "
                   "QuantizeLinear still maps each to a code, but SQNR, the errors and the "
                   "sweeps have no finite element to measure, so they stay empty (—).",
                   icon=":material/warning:")
