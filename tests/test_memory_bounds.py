"""Memory per upload is bounded, whatever the file claims (measured, not timed).

Each case runs in a subprocess that builds a hostile upload, resets its peak-RSS mark
(/proc/self/clear_refs) and loads the upload the way the app does (one io.TensorFile with the
app's element limit, then load). The extra peak memory must stay under ~3x the app's element
limit in bytes (16 Mi float32 = 64 MiB -> 192 MiB, plus a little for the interpreter); and six
hostile uploads loaded at once by six threads must keep the whole process under 2 GB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_ELEMENTS = 16 * 2**20  # the app's limit (app/tensors.py MAX_ELEMENTS)
BUDGET_MIB = 3 * MAX_ELEMENTS * 4 / 2**20 + 32  # ~3x the element limit in bytes, + slack

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="needs Linux /proc to measure peak RSS")

BUILD = textwrap.dedent("""
    import io, json, struct, sys, threading, time, zipfile
    import numpy as np

    MAX_ELEMENTS = 16 * 2**20

    def npy(shape, dtype="<f4", payload=b""):
        header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (dtype, shape)
        header = header.encode() + b" " * (64 - (len(header) + 11) % 64) + b"\\n"
        return b"\\x93NUMPY\\x01\\x00" + struct.pack("<H", len(header)) + header + payload

    def npz(name, member, declared=None):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(name, member)
        return buf.getvalue()

    def build(kind):
        if kind == "csv_over_limit":  # 32 Mi values: refused by counting, before parsing
            return b"0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\\n" * (2 * 2**20), "big.csv"
        if kind == "csv_at_limit":  # 16 Mi values: parsed into one 64 MiB float32 array
            return b"1.5,-2,3,4.25,0,1,2,3,4,5,6,7,8,9,10,11\\n" * 2**20, "max.csv"
        if kind == "csv_wide_at_limit":  # one row of 16 Mi values
            return b"1," * (MAX_ELEMENTS - 1) + b"2", "wide.csv"
        if kind == "npz_bomb":  # a 4-element .npy followed by 200 MiB of zeros, honest sizes
            return npz("a.npy", npy((4,), payload=bytes(16 + 200 * 2**20))), "bomb.npz"
        if kind == "npz_over_limit":  # promises 16 Mi + 1 float64: refused before inflating
            return npz("a.npy", npy((MAX_ELEMENTS + 1,), "<f8",
                                    bytes(8 * (MAX_ELEMENTS + 1)))), "big.npz"
        if kind == "safetensors_header":  # an 8 MiB JSON header of tiny objects
            body = b",".join(b'"t%d":{}' % i for i in range(8 * 2**20 // 12))
            raw = b"{" + body[: 8 * 2**20 - 2] .rsplit(b",", 1)[0] + b"}"
            return struct.pack("<Q", len(raw)) + raw, "h.safetensors"
        if kind == "npy_lies":  # claims 2**40 elements
            return npy((2**40,), payload=bytes(1024)), "lie.npy"
        raise ValueError(kind)

    def hwm_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024

    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024

    def upload(data, name):
        from qcore import io as qio
        try:
            f = qio.TensorFile(data, filename=name, max_elements=MAX_ELEMENTS)
            f.list()
            a = f.load(f.list()[0][0])
            return "loaded %s" % (a.shape,)
        except qio.TensorFileError as exc:
            return "refused: " + str(exc)[:120]

    import pandas, qcore.io  # imported before the measurement
    kinds = sys.argv[1].split(",")
    uploads = [build(k) for k in kinds]
    base = rss_mib()
    open("/proc/self/clear_refs", "w").write("5")
    t0 = time.perf_counter()
    results = [None] * len(uploads)
    def run(i):
        results[i] = upload(*uploads[i])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(uploads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"base_mib": base, "peak_mib": hwm_mib(), "extra_mib": hwm_mib() - base,
                      "seconds": time.perf_counter() - t0, "results": results}))
""")


def _measure(kinds: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", BUILD, ",".join(kinds)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind,outcome", [
    ("csv_over_limit", "refused"),
    ("csv_at_limit", "loaded"),
    ("csv_wide_at_limit", "loaded"),
    ("npz_bomb", "loaded"),
    ("npz_over_limit", "refused"),
    ("safetensors_header", "loaded"),
    ("npy_lies", "refused"),
])
def test_one_upload_costs_at_most_3x_the_element_limit(kind, outcome):
    m = _measure([kind])
    result = m["results"][0]
    if kind == "safetensors_header":  # a header of empty entries is refused, but only after
        outcome = "refused"           # it has been parsed: the parse is what is measured
    assert result.startswith(outcome), result
    assert m["extra_mib"] < BUDGET_MIB, m


def test_six_hostile_uploads_at_once_stay_under_2_gb():
    m = _measure(["csv_at_limit", "csv_over_limit", "npz_bomb", "safetensors_header",
                  "csv_wide_at_limit", "npz_over_limit"])
    assert m["peak_mib"] < 2048, m
