"""The benchmark runs end to end on tiny sizes (correct output shape; no timing assertions)."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from qcore.bench import cases as bench_cases
from qcore.bench import cli as bench
from qcore.bench import timing as bench_timing


def test_quick_benchmark_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--size", "32x64", "--json", str(out), "--no-warmup"]) == 0
    printed = capsys.readouterr().out
    assert "| Q int8 per-tensor |" in printed
    assert "copy bandwidth" in printed
    data = json.loads(out.read_text())
    names = [c["name"] for c in data["cases"]]
    assert names == [c.name for c in bench_cases.default_cases(quick=True)]
    for case in data["cases"]:
        assert case["results"]["qcore"] > 0
        assert case["roofline"] > 0


def test_every_case_runs_without_peers(capsys):
    assert bench.main(["--size", "8x64", "--no-peers", "--no-warmup"]) == 0
    printed = capsys.readouterr().out
    for case in bench_cases.default_cases():
        assert f"| {case.name} |" in printed


def test_peers_are_optional(monkeypatch):
    # a missing peer package only removes its column
    monkeypatch.setitem(bench_cases.PEERS, "onnxruntime", lambda case, inputs: None)
    cases, _ = bench_cases.run(bench_cases.default_cases(quick=True)[:2], (8, 64))
    assert all("onnxruntime" not in c.results for c in cases)
    assert all(c.results["qcore"] > 0 for c in cases)


def test_inputs_are_shared_and_valid():
    for case in bench_cases.default_cases():
        inputs = bench_cases.make_inputs(case, (8, 64))
        fn = bench_cases.qcore_impl(case, inputs)
        fn()  # every case is a valid qcore call


def test_size_parsing():
    assert bench._parse_size("4096x4096") == (4096, 4096)
    assert bench._parse_size("8192") == (2, 4096)


def test_cuda_backend_without_gpu_says_why(capsys):
    from qcore.kernels import cuda

    if cuda.cuda_available():
        pytest.skip("a GPU is present")
    assert bench.main(["--backend", "cuda", "--size", "8x64"]) == 2
    assert "no usable GPU" in capsys.readouterr().err


# ---------------------------------------------------------------- host, targets, --cpu, --cold

def test_header_names_the_host_and_the_compile_target(capsys, monkeypatch):
    import llvmlite.binding as llvm

    from qcore.bench import host as bench_host

    monkeypatch.setenv("NUMBA_CPU_NAME", "haswell")  # only read for the header here
    assert bench.main(["--size", "8x64", "--no-peers", "--no-warmup", "--only",
                       "Q int8 per-tensor"]) == 0
    out = capsys.readouterr().out
    info = bench_host.host_info()
    assert f"host CPU {llvm.get_host_cpu_name()} ({info['host_isa']})" in out
    assert "compiled for haswell" in out and "threading layer" in out
    assert f"{info['threads']} threads" in out


def test_vector_isa_summary():
    from qcore.bench.host import vector_isa

    assert vector_isa({"avx2": True, "avx512f": True}) == "AVX-512"
    assert vector_isa({"avx2": True, "avx512f": False}) == "AVX2"
    assert vector_isa({"sse2": True}) == "SSE2"


def test_cpu_target_needing_avx512_fails_clearly_on_an_avx2_host():
    from qcore.bench.host import target_problem

    avx2_host = {"avx": True, "avx2": True, "avx512f": False}
    msg = target_problem("skylake-avx512", avx2_host)
    assert msg and "AVX-512" in msg and "illegal instruction" in msg
    assert target_problem("haswell", avx2_host) is None
    assert target_problem("haswell", {"avx": True, "avx512f": False})  # no AVX2 either
    assert target_problem("skylake-avx512", {"avx2": True, "avx512f": True}) is None


def test_cpu_option_refuses_an_unrunnable_target(capsys, monkeypatch):
    from qcore.bench import host as bench_host

    monkeypatch.setattr(bench_host, "host_features", lambda: {"avx2": True, "avx512f": False})
    assert bench.main(["--cpu", "icelake-server", "--size", "8x64", "--no-peers"]) == 2
    assert "AVX-512" in capsys.readouterr().err


def test_cpu_option_merges_the_other_column(capsys, monkeypatch):
    # the subprocess itself is covered by its own parts; here its JSON is stood in for
    monkeypatch.setattr(bench, "_run_other_target", lambda name, args, shape: {
        "cpu": name, "info": {"threading_layer": "omp", "threads": 2}, "cache_dir": "/tmp/x",
        "rates": {"Q int8 per-tensor": 2.5e9}})
    assert bench.main(["--cpu", "haswell", "--size", "8x64", "--no-peers", "--no-warmup",
                       "--only", "Q int8 per-tensor"]) == 0
    out = capsys.readouterr().out
    assert "qcore[haswell] Gelem/s" in out and "| 2.50 |" in out


def test_sigill_in_the_child_is_reported(monkeypatch):
    import signal
    import subprocess

    from qcore.bench import host as bench_host

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, -signal.SIGILL, "", ""))
    with pytest.raises(RuntimeError, match="illegal instruction"):
        bench_host.run_for_target("znver4", ["--quick"])


def test_other_target_child_compiles_with_the_named_cpus_own_features(monkeypatch, tmp_path):
    """NUMBA_CPU_NAME alone keeps the host's features (numba's rule): on an AVX-512 host
    "haswell" would still be AVX-512 code. The child must get NUMBA_CPU_FEATURES="" too."""
    import subprocess

    from qcore.bench import host as bench_host

    seen = {}

    def run(cmd, env, **kwargs):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx512f")
    monkeypatch.setattr(subprocess, "run", run)
    bench_host.run_for_target("haswell", ["--quick"], cache_dir=tmp_path)
    assert seen["NUMBA_CPU_NAME"] == "haswell"
    assert seen["NUMBA_CPU_FEATURES"] == ""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="x86 CPU names")
def test_named_cpu_features_come_from_llvm():
    from qcore.kernels.bits import named_cpu_features

    assert named_cpu_features("haswell") == {"+f16c", "+avx2"}
    assert named_cpu_features("skylake-avx512") == {"+f16c", "+avx2", "+avx512f"}
    assert named_cpu_features("x86-64") == set()


def test_targets_are_judged_against_the_same_run():
    case = bench_cases.Case("Q int8 per-tensor", "quantize", "int8")
    case.results = {"qcore": 1.0e9, "onnxruntime": 1.0e9}
    assert bench_cases.target_verdicts(case, [case]) == ["≥0.9× onnxruntime: met"]
    case.results["onnxruntime"] = 2.0e9
    assert bench_cases.target_verdicts(case, [case]) == ["≥0.9× onnxruntime: NOT met"]
    f16 = bench_cases.Case("Q int8 per-tensor, float16 x", "quantize", "int8", x_dtype="float16")
    f16.results = {"qcore": 0.6e9}
    assert bench_cases.target_verdicts(f16, [case, f16]) == ["≥0.5× the float32 case: met"]
    f8 = bench_cases.Case("Q float8e4m3fn saturate", "quantize", "float8e4m3fn")
    f8.results = {"qcore": 1e9}
    assert bench_cases.target_verdicts(f8, [f8]) == ["≥10× onnxruntime: not measured",
                                               "≥20× ml_dtypes: not measured"]


def test_cold_child_times_each_first_call(capsys):
    # in-process (kernels may be cached already): the child's JSON line is well formed
    assert bench.main(["--cold-child", "Q int8 per-tensor,DQ int8 per-tensor",
                       "--size", "8x64"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(data["calls"]) == {"Q int8 per-tensor", "DQ int8 per-tensor"}
    assert all(v >= 0 for v in data["calls"].values()) and data["import_s"] >= 0


def test_cold_report_runs_every_phase_with_fresh_caches(capsys, monkeypatch):
    from qcore.bench import cold as bench_cold

    seen = []

    def spawn(names, cache, shape, timeout):
        seen.append((tuple(names), cache.name))
        return {"import_s": 0.1, "calls": {n: 1.0 for n in names},
                "calls_cpu": {n: 0.5 for n in names}, "load_average": 1.0}

    result = bench_cold.measure(bench_cold.COLD_CASES, (8, 64), spawn=spawn)
    each = [c for n, c in seen[:4]]
    assert len(set(each)) == 4 and "together" not in each  # a fresh empty cache per case
    assert seen[4] == (bench_cold.COLD_CASES, "together")
    assert all(c == "together" for _, c in seen[5:]) and len(seen) == 10  # primed
    report = bench_cold.format_report(result)
    assert "≤ 5 s: met" in report and "≤ 12 s: NOT met" not in report
    assert "| all four in one process | 4.00 | 2.00 | ≤ 12 s: met |" in report  # wall, CPU
    monkeypatch.setattr(bench_cold, "_spawn", spawn)
    assert bench.main(["--cold", "--size", "8x64"]) == 0
    out = capsys.readouterr().out
    assert "cold start" in out and "target" in out and "primed" in out


def test_cold_refuses_an_unknown_case(capsys):
    assert bench.main(["--cold", "--cold-cases", "Q int3"]) == 2
    assert "valid:" in capsys.readouterr().err


def test_cold_child_reports_cpu_seconds_too(capsys):
    assert bench.main(["--cold-child", "Q int8 per-tensor", "--size", "8x64"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(data["calls_cpu"]) == {"Q int8 per-tensor"}
    assert data["calls_cpu"]["Q int8 per-tensor"] >= 0


# ---------------------------------------------------------------- --busy, --cold-app


def test_busy_alternates_idle_and_busy_rounds_and_reports_the_ratio(capsys, monkeypatch):
    from qcore.bench import busy as bench_busy

    state = {"busy": False, "entered": 0, "left": 0}

    @contextlib.contextmanager
    def busy(pin):
        state["busy"], state["entered"] = True, state["entered"] + 1
        try:
            yield None
        finally:
            state["busy"], state["left"] = False, state["left"] + 1

    def make_call(name, shape):
        return name

    from qcore import config

    def rate(name, n, min_time):  # no clock: while "busy", the first case runs at half speed
        # with every thread and at 0.7 on the free core; the second keeps its speed. On one
        # thread of the idle machine the first runs at 0.8
        if name == "Q int8 per-tensor" and state["busy"]:
            return 0.7e9 if config.ADAPTIVE_WORKERS else 0.5e9
        if name == "Q int8 per-tensor" and state["threads"] == 1:
            return 0.8e9
        return 1e9

    import numba

    threads = numba.get_num_threads()
    state["threads"] = threads
    monkeypatch.setattr(numba, "set_num_threads", lambda n: state.update(threads=n))

    monkeypatch.setattr(bench_busy, "_rate", rate)
    monkeypatch.setattr(config, "ADAPTIVE_WORKERS", True)
    result = bench_busy.measure(["Q int8 per-tensor", "DQ int8 per-tensor"], (8, 64), make_call,
                                rounds=2, min_time=0.0, busy=busy)
    assert state["entered"] == state["left"] == 2
    assert config.ADAPTIVE_WORKERS  # restored
    assert bench_busy.ratios(result) == {"Q int8 per-tensor": 0.7, "DQ int8 per-tensor": 1.0}
    assert bench_busy.ratios(result, "busy_every_thread") == {"Q int8 per-tensor": 0.5,
                                                               "DQ int8 per-tensor": 1.0}
    assert bench_busy.ratios(result, "one_thread") == {"Q int8 per-tensor": 0.8,
                                                        "DQ int8 per-tensor": 1.0}
    assert state["threads"] == threads  # restored after the one-thread rounds
    report = bench_busy.format_report(result)
    assert "| Q int8 per-tensor | 1.00 | 0.70 | 0.70× | ≥ 0.6×: met | 0.50× | 0.80× |" in report
    assert "| DQ int8 per-tensor | 1.00 | 1.00 | 1.00× | ≥ 0.6×: met | 1.00× | 1.00× |" in report
    monkeypatch.setattr(bench_busy, "spinner", busy)
    monkeypatch.setattr(bench, "_busy_call", make_call)
    assert bench.main(["--busy", "--busy-rounds", "1", "--size", "8x64", "--only", "int8"]) == 0
    assert "busy/idle" in capsys.readouterr().out


def test_busy_spinner_is_killed_even_on_error():
    from qcore.bench import busy as bench_busy

    with pytest.raises(RuntimeError), bench_busy.spinner() as proc:
        assert proc.poll() is None  # spinning
        raise RuntimeError("boom")
    assert proc.poll() is not None


def test_cold_app_report_and_missing_chromium(capsys, monkeypatch):
    from app import bench_browser as bench_app

    result = {"cold": {"server_up_s": 1.0, "Home": {"page_s": 2.0, "since_start_s": 3.0},
                       "Quantize Lab": {"page_s": 20.0, "since_start_s": 26.0},
                       "pages_ready_s": 60.0, "warm_up_s": None},
              "warm": {"server_up_s": 1.0, "new_tab_s": 4.5, "bare_new_tab_s": 3.5,
                       **{t: 0.5 for t, _ in bench_app.PAGES}}}
    report = bench_app.format_report(result)
    assert "Home in a new browser tab 4.5 s (a bare Streamlit page in a new tab: 3.5 s" in report
    assert "| Home | 3.0 | 2.0 | nan | ≤ 10 s: met |" in report
    assert "| Quantize Lab | 26.0 | 20.0 | nan | ≤ 25 s: NOT met |" in report
    assert bench_app.cpu_seconds(os.getpid()) >= 0 or not os.path.exists("/proc")
    assert report.count("≤ 3 s: met") == len(bench_app.PAGES)
    assert "every page's default view ready 60 s after it started" in report
    assert "still going on" in report
    monkeypatch.setattr(bench_app, "CHROMIUM", "/nonexistent/chromium")
    assert bench_app.main([]) == 2
    assert "Chromium" in capsys.readouterr().err


def test_cold_app_flag_runs_the_apps_browser_timing(monkeypatch, tmp_path):
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    assert bench.main(["--cold-app", "--cold-app-wait", "5", "--json", "out.json"]) == 0
    assert calls[0][1:] == ["-m", "app.bench_browser", "--wait", "5.0", "--json", "out.json"]
    monkeypatch.chdir(tmp_path)  # not a checkout: no app/ here
    assert bench.main(["--cold-app"]) == 2


def test_cpu_time_mode_runs_one_thread_by_thread_cpu_time(capsys, monkeypatch):
    import numba

    monkeypatch.setattr(bench_timing, "CLOCK", bench_timing.CLOCK)
    monkeypatch.setattr(bench_timing, "ORT_THREADS", bench_timing.ORT_THREADS)
    before = numba.get_num_threads()
    try:
        assert bench.main(["--cpu-time", "--size", "8x64", "--no-warmup", "--only",
                           "Q int8 per-tensor"]) == 0
        assert numba.get_num_threads() == 1 and bench_timing.ORT_THREADS == 1
    finally:
        numba.set_num_threads(before)
    assert "CPU time of one thread" in capsys.readouterr().out


def test_markdown_names_the_host_versions_and_the_exact_command(tmp_path, capsys, monkeypatch):
    import datetime

    import llvmlite.binding as llvm
    import numba

    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/tmp/a cache")
    out = tmp_path / "perf.md"
    argv = ["--quick", "--size", "8x64", "--no-warmup", "--only", "int8 per-tensor",
            "--markdown", str(out)]
    assert bench.main(argv) == 0
    assert "| Q int8 per-tensor |" in capsys.readouterr().out  # the usual report as well
    text = out.read_text()
    onnxruntime = pytest.importorskip("onnxruntime")
    assert f"`get_host_cpu_name()` = `{llvm.get_host_cpu_name()}`" in text
    assert f"numba {numba.__version__} " in text
    assert f"onnxruntime {onnxruntime.__version__}," in text
    assert f"{os.cpu_count()} cores" in text
    assert datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d") in text
    assert ("- command: `NUMBA_CACHE_DIR='/tmp/a cache' python -m qcore.bench --quick --size "
            f"8x64 --no-warmup --only 'int8 per-tensor' --markdown {out}`") in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    wanted = [c.name for c in bench_cases.default_cases(quick=True) if "int8 per-tensor" in c.name.lower()]
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == wanted  # a header, then one row a case


def test_markdown_alone_replaces_the_report_on_stdout(capsys, monkeypatch):
    from qcore.bench.table import _ENV_SHOWN

    for name in _ENV_SHOWN:  # set by the caller (NUMBA_CACHE_DIR...): they prefix the command
        monkeypatch.delenv(name, raising=False)
    assert bench.main(["--size", "8x64", "--no-warmup", "--no-peers", "--only",
                       "Q int8 per-tensor", "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("### ")
    assert "`python -m qcore.bench --size 8x64 --no-warmup --no-peers --only 'Q int8 " in printed


def test_command_line_shows_the_code_changing_variables():
    env = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "", "HOME": "/root"}
    from qcore.bench.table import command_line

    assert (command_line(["--quick"], env)
            == "NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES= python -m qcore.bench --quick")



@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc")
def test_settle_waits_for_a_running_thread_of_this_process():
    """A thread of this process running without the GIL (as onnxruntime's spinning pool does)
    is seen, and settle waits for it up to its limit; once it has ended settle returns."""
    import threading
    import time

    from numba import njit

    @njit(nogil=True)
    def work():
        x = 0.0
        for k in range(20_000_000):
            x += k * 1e-9
        return x

    work()  # compiled before the thread starts
    done = threading.Event()

    def run():
        deadline = time.perf_counter() + 2.0
        while time.perf_counter() < deadline and not done.is_set():
            work()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        time.sleep(0.05)
        seen = max(bench_timing.own_runnable_threads() or 0 for _ in range(50))
        waited = bench_timing.settle(0.1)
    finally:
        done.set()
        thread.join()
    assert seen >= 1
    assert waited >= 0.1
    assert bench_timing.settle(1.0) < 1.0
