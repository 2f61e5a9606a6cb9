"""Benchmarks (not imported by the engine): ``python -m qcore.bench --help``.

- :mod:`qcore.bench.cli`: the command line (``python -m qcore.bench``);
- :mod:`qcore.bench.timing`: the clock, the copy bandwidth (the roofline) and peak extra memory;
- :mod:`qcore.bench.cases`: the side-by-side cases (qcore against onnxruntime, torch, ml_dtypes
  and NumPy), their speed targets, and the run that times them;
- :mod:`qcore.bench.table`: the table, and ``--markdown`` for docs/performance.md;
- :mod:`qcore.bench.host`: the host CPU, its vector ISA and numba's target, and runs for
  another LLVM CPU target (``--cpu haswell``);
- :mod:`qcore.bench.cold`: first calls from an empty numba cache (``--cold``);
- :mod:`qcore.bench.busy`: throughput with one core kept busy (``--busy``);
- :mod:`qcore.bench.cuda`: the GPU kernels (``--backend cuda``);
- :mod:`qcore.bench.report`: the whole-model report's measures (``python -m qcore.bench.report``).

The app's browser timing lives with the app: ``python -m app.bench_browser``.
"""
