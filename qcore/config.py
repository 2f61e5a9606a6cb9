"""Every tunable of qcore in one place: chunk sizes and the serial/parallel thresholds.

The values are performance choices only: no result depends on them (the kernels are bit-exact
for any chunk size and either path). Measured with ``python -m qcore.bench --sweep``.
"""

from __future__ import annotations

#: Elements per chunk of the CPU quantize/dequantize/min-max kernels: the unit of parallel work
#: and the size of the cache-resident phases (x, scales and codes of a chunk stay in L2).
CHUNK = 32768

#: Below this many elements the operators run the serial kernel: waking the second thread costs
#: more than it saves, and milliseconds when the other core is busy.
PARALLEL_THRESHOLD = 1 << 21

#: Per-group error sums (qcore.reductions.group_sse): parallel runs per thread (each with its own
#: buffer of the groups it touches), and the block length below which blocks are summed in one
#: pass instead of a run per block.
GROUP_RUNS_PER_THREAD = 4
SHORT_BLOCK = 16

#: Chunk size and serial/parallel threshold of the metrics reductions (qcore.metrics).
METRICS_CHUNK = 1 << 14
METRICS_PARALLEL_THRESHOLD = 1 << 16
