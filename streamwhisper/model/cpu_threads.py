"""The CPU threads under torch: how many each inference thread uses, and the OpenMP teams they keep.

torch's CPU kernels run on OpenMP (GNU libgomp in the PyPI wheels). Each thread that runs a
parallel torch op keeps a team of threads for the next one, and libgomp lets waiting team
threads spin only while the threads it manages are no more than the cores: one team too many
(the main thread's from loading the model, beside a worker's) and every parallel region wakes
sleeping threads. On a 2-core Intel Xeon a streamed window then cost 0.22-0.31 s at the median
instead of 0.15-0.17 s (the decoder's many small ops two to three times slower;
docs/tuning-log.md, 2026-12-01). So a thread gives its team back
(:func:`release_openmp_threads`) once it is done with the cores: the loading thread after the
warm-up, a worker after each batch and whenever its share shrinks.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
from threadpoolctl import ThreadpoolController, threadpool_limits

from ..cores import available_cores

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t (OpenMP 5.0)


def configure_threads(threads: int = 0) -> None:
    """Give the cores to torch: ``threads`` intra-op threads (0 keeps torch's one per core;
    several inference workers share them batch by batch: :func:`core_sharing`).

    numpy's BLAS runs single-threaded: its threads busy-wait after each call (the mel
    projection of every request) and take the cores from the torch threads encoding next
    (tiny.en streamed at a 0.5 s step: 250 ms a request instead of 170 ms).
    """
    threadpool_limits(1, user_api="blas")
    if threads:
        torch.set_num_threads(threads)


@functools.cache
def _libgomp() -> Any | None:
    """The GNU OpenMP runtime torch loaded (None for another runtime, or none)."""
    controllers = ThreadpoolController().select(prefix="libgomp").lib_controllers
    return controllers[0].dynlib if controllers else None


def release_openmp_threads() -> bool:
    """Let the calling thread's OpenMP team go (libgomp's ``omp_pause_resource_all``, which ends
    the team's threads; torch starts new ones at its next parallel op, which costs nothing
    measurable beside a request). False where there is no libgomp or the call is refused (inside
    a parallel region)."""
    libgomp = _libgomp()
    return libgomp is not None and libgomp.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0


def core_sharing(workers: int, threads: int = 0) -> Callable[[int], None]:
    """For ``workers`` inference threads: a hook to call on a worker thread with the number of
    batches running, this one included, before each batch and whenever that count changes, and
    with 0 once the batch ended. With several workers (and ``threads`` 0, torch's choice) a
    batch alone gets every core, one beside others its share (torch's intra-op thread count is
    per calling thread): one stream is not slowed by the second worker, and under load two
    batches run at once without four threads on two cores. Either way a thread gives its OpenMP
    team back when its share shrinks and when its batch ends, so that only the batch running
    keeps one (a single worker has a spare thread for turns' finals too: :mod:`..runtime.worker`)."""
    sharing = workers > 1 and not threads
    cores, mine = available_cores(), threading.local()

    def share(running: int) -> None:
        had = getattr(mine, "threads", None)
        n = had if not sharing else cores if running <= 1 else max(1, cores // workers)
        if running == 0 or (n and had and n < had):
            release_openmp_threads()
        if running and n and n != had:
            torch.set_num_threads(n)
            mine.threads = n

    return share
