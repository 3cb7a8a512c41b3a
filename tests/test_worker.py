"""The InferenceWorker's scheduling on a fake recogniser: the test holds the worker thread in
a batch (``TimedRecognizer.hold``) while it fills the queue, so every batch is known in advance."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest
from runtime_fakes import Gate, TimedRecognizer, request

from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.runtime.metrics import Metrics
from streamwhisper.runtime.pump import Outcome, SchedulerFull
from streamwhisper.runtime.worker import InferenceWorker
from streamwhisper.runtime.worker_stats import WorkerStats


def run(recognizer: TimedRecognizer, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main`` on a fresh loop; a broken worker fails it after 10 s instead of hanging it,
    and the recogniser is released whatever happens, so that the worker thread can end."""

    async def guarded() -> None:
        try:
            async with asyncio.timeout(10):
                await main()
        finally:
            recognizer.release()

    asyncio.run(guarded())


class Client:
    """Submits requests and keeps a future of each one's outcome."""

    def __init__(self, worker: InferenceWorker) -> None:
        self.worker = worker
        self.outcomes: dict[str, asyncio.Future[Outcome]] = {}

    def submit(  # type: ignore[no-untyped-def]
        self, key: str, endpoint: bool = False, bulk: bool = False, urgent: bool | None = None
    ):
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.outcomes[key] = future
        return self.worker.submit(dataclasses.replace(request(key, endpoint, urgent), bulk=bulk), future.set_result)

    async def outcome(self, key: str) -> Outcome:
        return await self.outcomes[key]


async def holding(worker: InferenceWorker, recognizer: TimedRecognizer, client: Client, key: str) -> Gate:
    """Start the worker with its first batch, request ``key``, held at its gate (released by
    the caller)."""
    held = recognizer.gate(0)
    worker.start()
    client.submit(key)
    await asyncio.to_thread(held.entered.wait)
    return held


async def busy(worker: InferenceWorker, recognizer: TimedRecognizer, client: Client) -> None:
    """Start the worker and keep its thread inside the batch of request "busy"."""
    recognizer.hold()
    worker.start()
    client.submit("busy")
    await asyncio.to_thread(recognizer.entered.wait)


def running(shares: list[int]) -> list[int]:
    """What ``on_share`` was told before and during batches (0 is a batch's end)."""
    return [n for n in shares if n]


def test_urgent_requests_go_first_then_oldest_first_at_most_max_batch_each() -> None:
    """Urgent: endpoint requests and those that may serve as one (a pause's, "p"); they run in
    batches of their own, so a turn's final never waits for other streams' partials."""
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=3)
        client = Client(worker)
        for key, endpoint in [("a", False), ("b", False), ("e1", True), ("c", False), ("e2", True), ("d", False)]:
            client.submit(key, endpoint)
        client.submit("p", urgent=True)
        client.submit("e3", endpoint=True, urgent=False)  # an endpoint is urgent whatever it says
        assert worker.pending == 8
        worker.start()
        for key in "abcd":
            assert isinstance(await client.outcome(key), Hypothesis)
        await worker.stop()
        assert recognizer.batches == [["e1", "e2", "p"], ["e3"], ["a", "b", "c"], ["d"]]

    run(recognizer, main)


def test_an_urgent_request_runs_without_the_partials_waiting_beside_it() -> None:
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4)
        client = Client(worker)
        for key, endpoint in [("a", False), ("e", True), ("b", False)]:
            client.submit(key, endpoint)
        worker.start()
        for key in "aeb":
            assert isinstance(await client.outcome(key), Hypothesis)
        await worker.stop()
        assert recognizer.batches == [["e"], ["a", "b"]]

    run(recognizer, main)


def test_each_batch_is_logged_at_debug_with_what_its_requests_wait_for(caplog: pytest.LogCaptureFixture) -> None:
    """For diagnosing load: each request of a batch, awaited by a turn's final (E), urgent (!)
    or neither, with its window's length and its wait."""
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4)
        client = Client(worker)
        client.submit("e", endpoint=True)
        client.submit("p", urgent=True)
        client.submit("a")
        worker.start()
        for key in "epa":
            assert isinstance(await client.outcome(key), Hypothesis)
        await worker.stop()

    with caplog.at_level("DEBUG", logger="streamwhisper.runtime.worker"):
        run(recognizer, main)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch of")]
    assert [line.split(" took ")[0] for line in lines] == ["batch of 2", "batch of 1"]
    assert [[part.split("s waited")[0] for part in line.split(": ", 1)[1].split(", ")] for line in lines] == [
        ["E0.0", "!0.0"],
        ["0.0"],
    ]


def test_a_request_is_withdrawn_while_it_waits_and_while_it_runs() -> None:
    """Withdrawn while it waits, it never runs; withdrawn while it runs, its batch stops at the
    model's next checkpoint and its result is never delivered."""
    recognizer = TimedRecognizer(checkpoints=True)

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4)
        client = Client(worker)
        await busy(worker, recognizer, client)
        waiting = client.submit("a")
        assert waiting.withdraw() and worker.pending == 0
        (batch,) = [batch for batch in client.worker._running.values() if batch]
        assert batch[0].request.key == "busy"
        running = batch[0]
        assert running.withdraw()
        recognizer.release()
        client.submit("b")
        assert isinstance(await client.outcome("b"), Hypothesis)
        await worker.stop()
        assert not client.outcomes["busy"].done() and not client.outcomes["a"].done()
        assert recognizer.batches == [["busy"], ["b"]]
        assert worker.stats.interrupted == 1 and worker.stats.requests == 1
        metrics = Metrics()
        for _ in range(2):  # the daemon passes the running total at each scrape
            metrics.count_worker(worker.stats.interrupted, worker.stats.paused)
        assert b"streamwhisper_batches_interrupted_total 1.0" in metrics.render()

    run(recognizer, main)


@pytest.mark.parametrize(
    ("under_way", "arriving", "beside"),
    [
        ("a", "hastened", True),  # the turn ended, its final waits for "p": it starts at once
        ("a", "endpoint", True),
        ("a", "pause", False),  # pauses are many, most no turn's end: it waits its turn
        ("e1", "endpoint", False),  # one slot: a turn's batch waits for the one under way
    ],
)
def test_what_starts_beside_a_batch_under_way(under_way: str, arriving: str, beside: bool) -> None:
    """One slot (``threads=1``): a request a turn's final waits for starts at once on the spare
    thread, the partials under way pausing for it; anything else waits for the slot."""
    recognizer = TimedRecognizer(checkpoints=True)
    first = recognizer.gate(0)
    starts: list[int] = []

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4, on_share=starts.append)
        client = Client(worker)
        client.submit(under_way, endpoint=under_way.startswith("e"))
        worker.start()
        await asyncio.to_thread(first.entered.wait)
        key = "e2" if arriving == "endpoint" else "p"
        job = client.submit(key, endpoint=arriving == "endpoint", urgent=True)
        if arriving == "hastened":
            job.hasten()
        if beside:
            assert isinstance(await client.outcome(key), Hypothesis), "ran while the first was held"
            assert not client.outcomes[under_way].done()
        first.release.set()
        for done in (under_way, key):
            assert isinstance(await client.outcome(done), Hypothesis)
        await worker.stop()
        assert recognizer.batches == [[under_way], [key]]
        assert worker.stats.interrupted == 0, "nothing thrown away"
        assert running(starts) == ([1, 2] if beside else [1, 1]) and starts.count(0) == 2

    run(recognizer, main)


def test_a_hastened_partial_is_urgent_and_served_as_its_turns_endpoint() -> None:
    """A partial whose hypothesis will close an ended turn goes before the partials beside it,
    and the recogniser serves it as the turn's endpoint (``RecognizerConfig.endpoint_min_ctx_s``)."""
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4)
        client = Client(worker)
        client.submit("a")
        client.submit("b").hasten()
        worker.start()
        for key in "ab":
            assert isinstance(await client.outcome(key), Hypothesis)
        await worker.stop()
        assert recognizer.batches == [["b"], ["a"]]
        assert [(r.key, r.endpoint) for r in recognizer.served] == [("b", True), ("a", False)]

    run(recognizer, main)


def test_bulk_requests_wait_for_every_live_one_and_run_alone() -> None:
    """Uploaded files' windows come after live requests, even older ones, one per batch."""
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4)
        client = Client(worker)
        await busy(worker, recognizer, client)
        for key, endpoint, bulk in [("u1", False, True), ("u2", False, True), ("a", False, False), ("e", True, False)]:
            client.submit(key, endpoint, bulk)
        recognizer.release()
        for key in ("u1", "u2", "a", "e"):
            assert isinstance(await client.outcome(key), Hypothesis)
        assert recognizer.batches == [["busy"], ["e"], ["a"], ["u1"], ["u2"]]
        recognizer.hold()  # a live request that arrives while a bulk window runs goes next
        client.submit("u3", bulk=True)
        client.submit("u4", bulk=True)
        await asyncio.to_thread(recognizer.entered.wait)
        client.submit("b")
        recognizer.release()
        for key in ("u3", "u4", "b"):
            await client.outcome(key)
        await worker.stop()
        assert recognizer.batches[5:] == [["u3"], ["b"], ["u4"]]

    run(recognizer, main)


def test_a_full_queue_refuses_with_scheduler_full() -> None:
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_pending=2)
        client = Client(worker)
        await busy(worker, recognizer, client)
        client.submit("a")
        client.submit("b")
        with pytest.raises(SchedulerFull):
            client.submit("c")
        recognizer.release()
        assert isinstance(await client.outcome("b"), Hypothesis)
        client.submit("c")  # room again once the queue drained
        assert isinstance(await client.outcome("c"), Hypothesis)
        await worker.stop()

    run(recognizer, main)


def test_a_failing_batch_is_retried_one_by_one_so_only_the_poisoned_request_fails() -> None:
    recognizer = TimedRecognizer(fail_on=["bad"])

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=3)
        client = Client(worker)
        await busy(worker, recognizer, client)
        for key in ["x", "bad", "y", "w"]:
            client.submit(key)
        recognizer.release()
        assert isinstance(await client.outcome("bad"), RuntimeError)
        assert isinstance(await client.outcome("x"), Hypothesis), "x shared the failing batch, and is served"
        assert isinstance(await client.outcome("y"), Hypothesis)
        assert isinstance(await client.outcome("w"), Hypothesis), "the next batch is served"
        client.submit("z")
        assert isinstance(await client.outcome("z"), Hypothesis)
        assert worker.stats.failures == 1
        await worker.stop()
        assert recognizer.batches == [["busy"], ["x", "bad", "y"], ["x"], ["bad"], ["y"], ["w"], ["z"]]

    run(recognizer, main)


def test_stop_drops_queued_requests_with_none_finishes_the_batch_and_joins() -> None:
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer)
        client = Client(worker)
        await busy(worker, recognizer, client)
        client.submit("a")
        client.submit("b")
        stopping = asyncio.create_task(worker.stop())
        assert await client.outcome("a") is None and await client.outcome("b") is None
        assert not stopping.done(), "the thread is still in its batch"
        recognizer.release()
        await stopping
        assert isinstance(await client.outcome("busy"), Hypothesis)
        assert recognizer.batches == [["busy"]], "dropped requests never run"
        with pytest.raises(SchedulerFull):
            client.submit("late")

    run(recognizer, main)


def test_stop_with_a_timeout_does_not_wait_for_the_batch_under_way() -> None:
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer)
        client = Client(worker)
        await busy(worker, recognizer, client)
        threads = list(worker._threads)
        await worker.stop(within_s=0.0)  # returns although the recogniser holds a thread
        assert any(t.is_alive() for t in threads) and not client.outcomes["busy"].done()
        recognizer.release()
        for thread in threads:
            await asyncio.to_thread(thread.join)

    run(recognizer, main)


def test_a_cancelled_request_is_not_run_and_never_answered() -> None:
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer)
        client = Client(worker)
        await busy(worker, recognizer, client)
        client.submit("gone").cancel()
        client.submit("kept")
        recognizer.release()
        assert isinstance(await client.outcome("kept"), Hypothesis)
        await worker.stop()
        assert recognizer.batches == [["busy"], ["kept"]]
        assert not client.outcomes["gone"].done()

    run(recognizer, main)


def test_two_worker_threads_run_two_batches_at_once() -> None:
    """With ``threads=2`` a request waits for no batch under way while the other thread is free;
    a turn's request then interrupts nothing (the free thread takes it); ``stop`` ends both."""
    recognizer = TimedRecognizer(checkpoints=True)
    starts: list[int] = []

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=4, threads=2, on_share=starts.append)
        client = Client(worker)
        held = await holding(worker, recognizer, client, "busy")
        client.submit("a")
        assert isinstance(await client.outcome("a"), Hypothesis), "ran beside the held batch"
        client.submit("e", endpoint=True)
        assert isinstance(await client.outcome("e"), Hypothesis)
        assert not client.outcomes["busy"].done()
        held.release.set()
        assert isinstance(await client.outcome("busy"), Hypothesis)
        threads = list(worker._threads)
        await worker.stop()
        assert not any(t.is_alive() for t in threads)
        assert worker.stats.interrupted == 0 and worker.stats.requests == 3
        assert sorted(map(sorted, recognizer.batches)) == [["a"], ["busy"], ["e"]]
        assert running(starts) == [1, 2, 2], "alone, then each beside the held batch"
        assert starts.count(0) == 3, "each thread gives the cores back after its batch"

    run(recognizer, main)


@pytest.mark.parametrize(
    ("threads", "waiting", "sizes"),
    [(2, 7, [4, 2, 1]), (2, 2, [2]), (2, 1, [1]), (1, 7, [7])],
)
def test_each_thread_takes_its_share_of_the_waiting_requests(threads: int, waiting: int, sizes: list[int]) -> None:
    """With two threads a batch takes half the waiting requests (at least two), oldest first:
    a CPU runs a window batched about as fast as alone, so one thread's batch of seven would
    keep every request in it waiting for seven windows while the other thread had none."""
    recognizer = TimedRecognizer()

    async def main() -> None:
        worker = InferenceWorker(recognizer, max_batch=16, threads=threads)
        client = Client(worker)
        keys = [f"r{i}" for i in range(waiting)]
        for key in keys:
            client.submit(key)
        worker.start()
        for key in keys:
            assert isinstance(await client.outcome(key), Hypothesis)
        await worker.stop()
        expected = [keys[sum(sizes[:i]) : sum(sizes[: i + 1])] for i in range(len(sizes))]  # oldest first
        assert sorted(recognizer.batches, key=min) == expected  # (two threads call in either order)

    run(recognizer, main)


def test_a_turn_s_request_beside_a_withdrawn_batch_gets_every_core() -> None:
    """One stream, two threads: the partial under way is withdrawn by the turn's request that
    supersedes it, and stops at its next checkpoint; the turn's batch, on the free thread, counts
    as running alone (every core), not beside it (one core for its whole run)."""
    recognizer = TimedRecognizer(checkpoints=True)
    starts: list[int] = []

    async def main() -> None:
        worker = InferenceWorker(recognizer, threads=2, on_share=starts.append)
        client = Client(worker)
        held = recognizer.gate(0)
        worker.start()
        partial = client.submit("partial")
        await asyncio.to_thread(held.entered.wait)
        assert partial.withdraw()
        client.submit("e", endpoint=True)
        assert isinstance(await client.outcome("e"), Hypothesis)
        held.release.set()
        await worker.stop()
        assert not client.outcomes["partial"].done(), "a withdrawn request is never answered"
        assert running(starts) == [1, 1], "the turn's batch ran as if alone"
        assert starts.count(0) == 2
        assert worker.stats.interrupted == 1, "the withdrawn batch stopped at its checkpoint"

    run(recognizer, main)


def test_utilization_counts_every_worker_thread() -> None:
    stats = WorkerStats(clock=lambda: 10.0, threads=2)
    stats.recent.extend([(5.0, 10.0), (7.5, 10.0)])  # one thread busy 5 s, the other 2.5 s
    assert stats.utilization(5.0) == pytest.approx(0.75)


def test_a_request_taken_while_the_worker_is_saturated_is_marked_crowded() -> None:
    """Busy more than 90 % of the last 5 s (on the worker's clock): the recogniser is told, so
    that a live window alone costs what it costs in a batch; not an upload's window, whose
    transcript must not depend on the load; and once the load is gone, no request."""
    crowded: list[bool] = []

    class Seen(TimedRecognizer):
        def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
            crowded.extend(r.crowded for r in requests)
            return super().recognize(requests)

    recognizer = Seen()
    now = [100.0]

    async def main() -> None:
        worker = InferenceWorker(recognizer, threads=2, clock=lambda: now[0])
        client = Client(worker)
        worker.start()
        worker.stats.recent.extend([(95.0, 100.0), (95.5, 100.0)])  # 9.5 of 10 thread-seconds
        client.submit("under load")
        await client.outcome("under load")
        client.submit("upload", bulk=True)
        await client.outcome("upload")
        now[0] = 104.0  # 2 of the last 10 thread-seconds: not saturated
        client.submit("after it")
        await client.outcome("after it")
        await worker.stop()

    run(recognizer, main)
    assert crowded == [True, False, False]


def test_a_turn_s_final_that_starts_beside_another_batch_is_marked_crowded() -> None:
    """A turn's request that starts while another batch runs gets one core of the two: it is
    served as in a batch (fitted, greedy), not at the full context with beam search, which on one
    core takes three times as long. Alone it is not, and neither is a partial beside a partial."""
    crowded: dict[object, bool] = {}

    class Seen(TimedRecognizer):
        def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
            crowded.update((r.key, r.crowded) for r in requests)
            return super().recognize(requests)

    recognizer = Seen()

    async def main() -> None:
        worker = InferenceWorker(recognizer, threads=2)
        client = Client(worker)
        held = await holding(worker, recognizer, client, "p1")
        client.submit("p2")
        await client.outcome("p2")
        client.submit("e1", endpoint=True)
        await client.outcome("e1")
        held.release.set()
        await client.outcome("p1")
        client.submit("e2", endpoint=True)
        await client.outcome("e2")
        await worker.stop()

    run(recognizer, main)
    assert crowded == {"p1": False, "p2": False, "e1": True, "e2": False}


async def until(condition: Callable[[], bool]) -> None:
    """Wait for a state of the worker threads (looked at every few ms, on a thread of its own;
    ``run``'s timeout fails a test whose state never comes, and the thread gives up then)."""

    def poll() -> None:
        for _ in range(2000):
            if condition():
                return
            time.sleep(0.005)

    await asyncio.to_thread(poll)


def test_a_batch_of_partials_pauses_while_a_turn_s_final_runs_which_takes_every_core() -> None:
    """One slot: a batch of partials that reaches a checkpoint while the spare thread runs a
    request a turn's final waits for stops there until that batch ends (nothing thrown away);
    the turn's batch, begun beside it, takes every core at its next checkpoint."""
    recognizer = TimedRecognizer(checkpoints=True)
    starts: list[int] = []

    async def main() -> None:
        worker = InferenceWorker(recognizer, on_share=starts.append)
        client = Client(worker)
        held_partial, held_turn = recognizer.gate(0), recognizer.gate(1)
        worker.start()
        client.submit("partial")
        await asyncio.to_thread(held_partial.entered.wait)
        client.submit("e", endpoint=True)
        await asyncio.to_thread(held_turn.entered.wait)
        held_partial.release.set()
        await until(lambda: bool(worker._paused))
        assert not client.outcomes["partial"].done() and worker.stats.paused == 1
        held_turn.release.set()
        assert isinstance(await client.outcome("e"), Hypothesis)
        assert isinstance(await client.outcome("partial"), Hypothesis)
        await worker.stop()
        assert worker.stats.interrupted == 0, "the paused batch was not thrown away"
        assert recognizer.batches == [["partial"], ["e"]]
        assert running(starts) == [1, 2, 1], "the turn's batch began beside the partials, then had every core"
        assert starts.count(0) == 2
        metrics = Metrics()
        metrics.count_worker(worker.stats.interrupted, worker.stats.paused)
        assert b"streamwhisper_batches_paused_total 1.0" in metrics.render()

    run(recognizer, main)


def test_with_two_slots_a_turn_s_final_pauses_one_batch_of_two() -> None:
    """Two slots, both running partials: a turn's request starts at once on a spare thread, and
    one of the two batches pauses (so that two run, as before) until the other ends."""
    recognizer = TimedRecognizer(checkpoints=True)

    async def main() -> None:
        worker = InferenceWorker(recognizer, threads=2)
        client = Client(worker)
        gates = [recognizer.gate(i) for i in range(3)]
        worker.start()
        for i, key in enumerate(["p1", "p2"]):
            client.submit(key)
            await asyncio.to_thread(gates[i].entered.wait)
        client.submit("e", endpoint=True)
        await asyncio.to_thread(gates[2].entered.wait)
        gates[0].release.set()
        gates[1].release.set()
        await asyncio.wait([client.outcomes["p1"], client.outcomes["p2"]])
        assert worker.stats.paused == 1, "one of the two paused, the other ran on"
        assert not client.outcomes["e"].done()
        gates[2].release.set()
        assert isinstance(await client.outcome("e"), Hypothesis)
        await worker.stop()
        assert worker.stats.interrupted == 0
        assert recognizer.batches == [["p1"], ["p2"], ["e"]]

    run(recognizer, main)


def test_a_batch_pauses_once_at_most() -> None:
    """One slot: a batch of partials that paused for one turn's batch does not pause for the
    next one (turns' finals delay partials; they cannot starve them)."""
    recognizer = TimedRecognizer(checkpoints=True)

    async def main() -> None:
        worker = InferenceWorker(recognizer)
        client = Client(worker)
        first, second = recognizer.gate(0), recognizer.gate(0, after_checkpoint=True)
        turns = [recognizer.gate(1), recognizer.gate(2)]
        worker.start()
        client.submit("partial")
        await asyncio.to_thread(first.entered.wait)
        client.submit("e1", endpoint=True)
        await asyncio.to_thread(turns[0].entered.wait)
        first.release.set()  # at its checkpoint, "e1" runs beside it: it pauses
        await until(lambda: worker.stats.paused == 1)
        turns[0].release.set()
        assert isinstance(await client.outcome("e1"), Hypothesis)
        await asyncio.to_thread(second.entered.wait)  # went on, held before its second checkpoint
        client.submit("e2", endpoint=True)
        await asyncio.to_thread(turns[1].entered.wait)
        second.release.set()  # crowded again, but it paused once
        assert isinstance(await client.outcome("partial"), Hypothesis), "finished while e2 was held"
        turns[1].release.set()
        assert isinstance(await client.outcome("e2"), Hypothesis)
        await worker.stop()
        assert worker.stats.paused == 1 and worker.stats.interrupted == 0
        assert recognizer.batches == [["partial"], ["e1"], ["e2"]]

    run(recognizer, main)


def test_free_memory_is_given_back_after_a_batch_every_30_s_by_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a batch's results went out (no request waits for it), at most once in
    ``TRIM_EVERY_S`` whichever thread comes first; on the worker's clock, not the wall's."""
    import streamwhisper.runtime.worker as worker_module

    recognizer = TimedRecognizer()
    now = [0.0]
    trims: list[float] = []
    monkeypatch.setattr(worker_module, "release_free_memory", lambda: trims.append(now[0]))

    async def main() -> None:
        worker = InferenceWorker(recognizer, threads=2, clock=lambda: now[0])
        client = Client(worker)
        worker.start()
        for t, key in [(10.0, "a"), (31.0, "b"), (35.0, "c"), (70.0, "d")]:
            now[0] = t
            client.submit(key)
            assert isinstance(await client.outcome(key), Hypothesis)
        await worker.stop()

    run(recognizer, main)
    # (a thread may read the clock after the test moved it on: when does not matter, how often does)
    assert len(trims) == 2 and trims[0] >= 31.0 and trims[1] == 70.0
