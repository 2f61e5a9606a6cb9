"""Settings kept: a learner who changes every setting of a page, leaves it by the sidebar and
comes back finds each one as they left it — on every page, Model Fidelity included.

Each setting is changed the way the browser changes it (the formatted option sent back, a
number stepped, a switch flipped), one after another, widgets that appear on the way included
(Model Fidelity's calibration method appears once static activations are chosen); then Home
and back. Every widget shown before leaving must be shown again with the same value."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import open_app_page
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest

PAGES = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "pages").glob("*.py"))
KINDS = ("selectbox", "radio", "multiselect", "slider", "number_input", "text_input", "toggle",
         "checkbox", "button_group", "select_slider")
#: Text settings and what a learner types there (a text setting not named here is kept as it
#: is: typing into a path or a state-feedback field changes which model the page shows).
TYPED = {"mf_filter": "w", "mr_more": "int4:blocked64", "user": "1, 2.5, -3"}


def shown(at: AppTest) -> dict[str, object]:
    """Every setting widget on screen (keyed by its setting's name) and its value."""
    out: dict[str, object] = {}
    for kind in KINDS:
        for w in at.get(kind):
            key = getattr(w, "key", None)
            if key and not key.startswith("_") and not key.startswith("$$"):
                v = w.value
                out[key] = list(v) if isinstance(v, (list, tuple)) else v
    return out


def _send(w, strings: list[str]) -> None:
    """Make ``w`` send ``strings`` (formatted options) on the next run, as the browser does."""

    one = type(w).__name__ in ("Selectbox", "Radio")

    class Sent(type(w)):
        @property
        def _widget_state(self) -> WidgetState:
            ws = WidgetState()
            ws.id = self.id
            if one:
                ws.string_value = strings[0]
            else:
                ws.string_array_value.data[:] = strings
            return ws

    w.__class__ = Sent


def change(w) -> bool:
    """Change one setting widget to another valid value; False when it has no other."""
    kind = type(w).__name__
    if kind in ("Selectbox", "Radio"):
        if len(w.options) < 2:
            return False
        now = w.options.index(w.format_func(w.value)) if w.value is not None else -1
        _send(w, [w.options[(now + 1) % len(w.options)]])
    elif kind in ("Multiselect", "ButtonGroup"):
        fmt = w.format_func
        value = w.value
        single = kind == "ButtonGroup" and not isinstance(value, list)
        now = [fmt(value)] if single else [fmt(v) for v in (value or [])]
        other = [o for o in w.options if o not in now]
        if not other:
            if len(now) < 2:
                return False
            _send(w, now[:-1])
        else:
            _send(w, [other[0]] if single else now + [other[0]])
    elif kind == "Slider":
        if isinstance(w.value, (list, tuple)):
            return False
        lo, hi = w.min, w.max
        if lo == hi:
            return False
        w.set_value(type(w.value)(lo if w.value != lo else hi))
    elif kind == "NumberInput":
        step = w.step or 1
        v = w.value
        hi = w.proto.max if w.proto.has_max else math.inf
        new = v + step if v + step <= hi else v - step
        w.set_value(type(v)(new))
    elif kind in ("Toggle", "Checkbox"):
        w.set_value(not w.value)
    elif kind == "TextInput":
        if w.key not in TYPED or w.value == TYPED[w.key]:
            return False
        w.input(TYPED[w.key])
    else:
        return False
    return True


def change_every_setting(at: AppTest, keep_as_is: set[str] = frozenset()) -> set[str]:
    """Change each setting once (new ones as they appear); returns those changed."""
    changed: set[str] = set()
    tried: set[str] = set(keep_as_is)
    for _ in range(60):
        widgets = {w.key: w for kind in KINDS for w in at.get(kind)
                   if getattr(w, "key", None) in shown(at)}
        # a disabled widget is left until a change enables it (a browser cannot touch it)
        todo = [k for k, w in widgets.items() if k not in tried and not w.proto.disabled]
        if not todo:
            break
        key = todo[0]
        tried.add(key)
        w = widgets[key]
        if change(w):
            at.run()
            assert not at.exception, (key, [e.message for e in at.exception])
            changed.add(key)
    return changed


def assert_kept(at: AppTest, page: str, keep_as_is: set[str] = frozenset()) -> None:
    changed = change_every_setting(at, keep_as_is)
    before = shown(at)
    away = "pages/glossary.py" if page != "glossary" else "pages/home.py"
    at.switch_page(away).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception
    after = shown(at)
    lost = {k: (v, after.get(k, "not shown")) for k, v in before.items() if after.get(k) != v}
    assert not lost, f"{page}: settings forgotten (left → back): {lost}"
    assert changed, f"{page}: no setting could be changed"


@pytest.fixture
def tiny_path(tmp_path, monkeypatch):
    onnx = pytest.importorskip("onnx")
    from tests.test_model import tiny_model

    monkeypatch.setenv("QCORE_REPORT_ROOTS", str(tmp_path))
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    return str(path)


def test_model_fidelity_keeps_every_setting(tiny_path):
    """Every widget of Model Fidelity on a model from a path — runtime, recipes, tensors,
    activations and their calibration and float sites, seed, budget, float toggle,
    refinement, the speed objective and its value — changed, then the sidebar to another page
    and back."""
    at = open_app_page("pages/model_fidelity.py", {"mf_source": "path", "mf_path": tiny_path,
                                                   "mf_recipes": "int8:per-axis",
                                                   "mf_act": "static:int8"})
    assert_kept(at, "model_fidelity", keep_as_is={"mf_source", "mf_path", "mf_npz",
                                                  "mf_feedback"})
    for key in ("mf_act_method", "mf_act_float", "mf_budget", "mf_refine", "mf_speed_goal",
                "mf_seed", "mf_filter", "mf_float", "mf_runtime"):
        assert key in shown(at), key  # each was on screen, changed and kept


@pytest.mark.parametrize("page", [p for p in PAGES if p not in ("model_fidelity",)])
def test_every_page_keeps_every_setting(page):
    at = open_app_page(f"pages/{page}.py")
    if not shown(at):
        pytest.skip(f"{page} has no settings")
    assert_kept(at, page, keep_as_is={"mr_source", "src", "mr_path", "mr_report_path"})
