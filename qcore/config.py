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

#: Run the bandwidth-bound kernels (qcore.kernels.cpu.BANDWIDTH_BOUND) on the free cores alone
#: when other processes keep cores busy (the kernel's run queue, /proc/loadavg, read at each
#: parallel call; Linux only): a worker whose core another process holds is descheduled for a
#: time slice or more and the call's join waits for it. Off: always numba's thread count.
ADAPTIVE_WORKERS = True

#: Seconds a run-queue reading stands for the parallel calls that follow it.
RUN_QUEUE_EVERY = 0.01

#: After a parallel call its worker threads spin for a while before sleeping (OpenMP's wait
#: policy: 3-10 ms measured on znver3) and count as runnable meanwhile: for this long after a
#: parallel call they are taken for ours, not for another process's.
OWN_SPIN_SECONDS = 0.02

#: Per-group error sums (qcore.reductions.group_sse): parallel runs per thread (each with its own
#: buffer of the groups it touches), and the block length below which blocks are summed in one
#: pass instead of a run per block.
GROUP_RUNS_PER_THREAD = 4
SHORT_BLOCK = 16

#: Chunk size and serial/parallel threshold of the metrics reductions (qcore.metrics). The
#: threshold equals the kernels': below it the second thread saves a millisecond or two, less
#: than compiling the parallel variants costs the app's first views on a cold start.
METRICS_CHUNK = 1 << 14
METRICS_PARALLEL_THRESHOLD = 1 << 21

#: Output arrays (and the kernels' converted zero points) of at least this many bytes come from
#: a small pool of reused buffers (as onnxruntime's arena does): a fresh allocation costs a page
#: fault and the kernel zeroing every page on first touch, as much memory traffic as a
#: dequantize's own writes. A buffer is reused only once nothing references the array handed
#: out from it.
OUTPUT_POOL_MIN_BYTES = 64 << 10

#: Most bytes the output pool keeps referenced (in use or free); 0 turns the pool off.
OUTPUT_POOL_BYTES = 256 << 20
