"""One name per tensor on every model page: the names the shipped tensors (``datasets/``) use.

A BERT encoder's checkpoint calls a weight ``encoder.layer.0.output.dense.weight`` and its ONNX
graph calls the activation that weight reads ``mul_54``; the shipped tensors, made from the same
checkpoint by ``datasets/build.py``, call them ``layer0.ffn.out.weight`` and ``layer0.ffn.act``.
A learner who reads a site's range on Model Report and its sensitivity on Model Fidelity needs
one name for it, so both pages name tensors through this module:

- :func:`tensor_name`: a checkpoint key → the shipped name (``encoder.layer.{i}.`` + attention
  query / key / value / output.dense, intermediate.dense, output.dense → ``layer{i}.attn.query``
  … ``attn.out``, ``ffn.in``, ``ffn.out``); any other key is its own name.
- :func:`site_name`: an activation site → the name of the tensor it is, by the weights that read
  it (the input of a layer's query/key/value is ``layer{i}.input``, of its attention output
  projection ``layer{i}.attn.context``, of its FFN up-projection ``layer{i}.ffn.input``, of its
  FFN down-projection — the GELU's output — ``layer{i}.ffn.act``); a site of any other model is
  called by its graph tensor name.

Pure string functions (no onnx, no UI), so the report (:mod:`qcore.report`) and the model tool
(:mod:`qcore.model`) can both use them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["site_name", "tensor_name"]

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
#: Checkpoint part → shipped part (datasets/build.py's ``extract_weights``).
_PARTS = {"attention.self.query": "attn.query", "attention.self.key": "attn.key",
          "attention.self.value": "attn.value", "attention.output.dense": "attn.out",
          "intermediate.dense": "ffn.in", "output.dense": "ffn.out"}
_SHIPPED = re.compile(r"^layer(\d+)\.(attn\.query|attn\.key|attn\.value|attn\.out|ffn\.in|"
                      r"ffn\.out)\.weight$")
#: The weight a site feeds → the site's name within its layer (datasets/build.py's
#: ``bert_forward``: ``layer{i}.input`` enters the layer, ``layer{i}.ffn.act`` is after GELU).
_SITES = {"attn.query": "input", "attn.key": "input", "attn.value": "input",
          "attn.out": "attn.context", "ffn.in": "ffn.input", "ffn.out": "ffn.act"}


def tensor_name(key: str) -> str:
    """The shipped name of a checkpoint key (module doc); other keys unchanged."""
    m = _LAYER.match(key)
    if m and m.group(2) in _PARTS:
        return f"layer{m.group(1)}.{_PARTS[m.group(2)]}.{m.group(3)}"
    return key


def site_name(tensor: str, weights: Sequence[str]) -> str:
    """The name of the activation ``tensor`` (a graph name) read by ``weights`` (their
    checkpoint or shipped names): the shipped layer name when every weight is a BERT layer's
    projection and they agree on one (module doc), else ``tensor`` itself."""
    got = set()
    for w in weights:
        m = _SHIPPED.match(tensor_name(w))
        if m is None:
            return tensor
        got.add(f"layer{m.group(1)}.{_SITES[m.group(2)]}")
    return got.pop() if len(got) == 1 else tensor
