"""The CPU threads under torch: numpy's BLAS on one thread, cores shared between inference
threads, and each thread's OpenMP team given back when it is done (streamwhisper.model.cpu_threads)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from streamwhisper.model.cpu_threads import configure_threads, core_sharing, release_openmp_threads

CORES = len(os.sched_getaffinity(0))
GNU_OPENMP = any((Path(torch.__file__).parent / "lib").glob("libgomp*"))  # the PyPI wheels' runtime
needs_a_team = pytest.mark.skipif(
    not GNU_OPENMP or CORES < 2 or not Path("/proc/self/task").is_dir(),
    reason="needs torch's GNU OpenMP, two cores and Linux's /proc to see a team's threads",
)


def test_configure_threads_leaves_numpy_blas_one_thread() -> None:
    np.ones((64, 64), dtype=np.float32) @ np.ones((64, 64), dtype=np.float32)  # BLAS is loaded
    with threadpool_limits(2, user_api="blas"):
        configure_threads(torch.get_num_threads())
        blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
        assert blas and all(pool["num_threads"] == 1 for pool in blas)


def test_core_sharing_gives_a_batch_alone_every_core_and_one_beside_another_its_share() -> None:
    """Two inference workers on this machine's cores: torch threads are set on the calling
    thread before each batch, only when the count changes."""
    share = core_sharing(2)
    seen: list[int] = []

    def worker() -> None:
        share(1)
        seen.append(torch.get_num_threads())
        share(2)
        seen.append(torch.get_num_threads())
        share(0)  # the batch ended: the count stays for the next one
        seen.append(torch.get_num_threads())

    on_a_thread(worker)
    assert seen == [CORES, max(1, CORES // 2), max(1, CORES // 2)]


@pytest.mark.parametrize("workers, threads", [(1, 0), (2, 3)])
def test_one_worker_or_an_explicit_thread_count_shares_nothing(workers: int, threads: int) -> None:
    share = core_sharing(workers, threads)
    seen: list[int] = []

    def worker() -> None:
        torch.set_num_threads(1 + (CORES > 1))  # (not a count core sharing would pick for 2 running)
        for running in (1, 2, 0, 1):
            share(running)
            seen.append(torch.get_num_threads())

    on_a_thread(worker)
    assert seen == [1 + (CORES > 1)] * 4


def tasks() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def parallel_op() -> None:
    """A torch op large enough to run on the calling thread's OpenMP team."""
    x = torch.ones(1 << 22)
    assert float((x * 2).sum()) == 2 * (1 << 22)


def gone(threads: set[str], deadline_s: float = 10.0) -> bool:
    """Whether ``threads`` end (a team's threads leave once released; polled, not timed)."""
    end = time.monotonic() + deadline_s
    while threads & tasks():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def on_a_thread(fn: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised on the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


@needs_a_team
def test_a_released_team_s_threads_end_and_the_next_op_makes_a_new_one() -> None:
    """A thread's parallel op leaves a team of threads behind it; released, they end (libgomp
    lets waiting threads spin only while its threads are no more than the cores, so a team
    beside the workers' slows every one of them), and torch builds a new one next time."""

    def worker() -> None:
        torch.set_num_threads(CORES)
        before = tasks()
        parallel_op()
        team = tasks() - before
        assert team, "a parallel op left no team behind"
        assert release_openmp_threads()
        assert gone(team), "the released team's threads still run"
        parallel_op()
        assert tasks() - before, "the next parallel op made a new team"
        assert release_openmp_threads()

    on_a_thread(worker)


@needs_a_team
def test_a_worker_gives_its_team_back_when_its_share_shrinks_and_when_its_batch_ends() -> None:
    share = core_sharing(2)

    def worker() -> None:
        before = tasks()
        for shrink in (2, 0):  # another batch starts beside it; its batch ends
            share(1)
            parallel_op()
            team = tasks() - before
            assert team, "a batch alone runs on every core"
            share(shrink)
            assert gone(team), f"share({shrink}) kept the team"

    on_a_thread(worker)


@needs_a_team
def test_a_lone_worker_s_threads_give_their_teams_back_after_each_batch() -> None:
    """``listen`` and a one-worker daemon run a turn's final on the worker's spare thread beside
    the main one: each thread's team must end with its batch."""
    share = core_sharing(1)

    def worker() -> None:
        torch.set_num_threads(CORES)
        before = tasks()
        share(1)
        parallel_op()
        team = tasks() - before
        assert team, "a batch runs on every core"
        share(0)
        assert gone(team), "the batch ended and its thread kept its team"

    on_a_thread(worker)


@needs_a_team
def test_the_daemon_s_loading_thread_keeps_no_team_beside_its_workers() -> None:
    """``serve`` and ``listen`` load and warm up the model on one thread and recognise on
    others: the loading thread's team must not outlive the warm-up."""
    from streamwhisper.cli import worker_recognizer
    from streamwhisper.config import load_config

    def loader() -> None:
        before = tasks()
        assert worker_recognizer(load_config(None)) is not None
        assert gone(tasks() - before), "threads left running after loading"

    on_a_thread(loader)
