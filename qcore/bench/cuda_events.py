"""The CUDA-event clock shared by ``python -m qcore.bench.cuda`` and its torch peer
(:mod:`qcore.bench.cuda_torch`): one place, so both time their launches the same way."""

from __future__ import annotations

import statistics

#: Launches timed back to back between one pair of CUDA events.
LAUNCHES = 20


def event_rounds(fn, repeat: int, launches: int, event, spin) -> float:
    """Median seconds of one fn() over `repeat` rounds of `launches` back-to-back calls
    between two CUDA events (``event()`` makes one: numba's or torch's, whose elapsed_time is
    in ms), each round after ``spin()`` has queued work that keeps the GPU busy."""
    times = []
    for _ in range(max(1, repeat)):
        start, end = event(), event()
        spin()
        start.record()
        for _ in range(launches):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / launches)
    return statistics.median(times)
