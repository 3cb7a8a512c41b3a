"""Faults inside the daemon: a poisoned window and a shutdown with a saturated worker.

A recogniser that raises on one session's windows (injected at the Recognizer seam) fails that
session with ``internal_error`` and 1011, after the finals of what it had heard; the sessions that
shared its batches are served as if nothing happened. A shutdown whose worker is stuck in a batch
ends within ``shutdown_timeout_s`` (on a clock the test moves): every session gets the finals of
what was heard, ``closed`` and 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer
from runtime_fakes import (
    TimedRecognizer,
    advance,
    final_numbers,
    is_partial,
    on_clock_loop,
    read_to_close,
    read_until,
    recv_json,
    running_daemon,
    send_audio,
    spoken_in_speech,
    stream_url,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.scoring import word_error_rate
from streamwhisper.client import Closed, StreamClient
from streamwhisper.events import Error, Final
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest

SR = 16_000
EOF = json.dumps({"type": "eof"})
PING = json.dumps({"type": "ping"})  # no such message: answered with a harmless unknown_message error


def words_of(messages: list[dict[str, Any]], kind: str) -> list[str]:
    return [w["word"] for m in messages if m["type"] == kind for w in m.get("words", [])]


@on_clock_loop
async def test_a_poisoned_window_fails_its_session_with_1011_and_the_others_are_served(jfk_audio: np.ndarray) -> None:
    recognizer = TimedRecognizer()
    async with running_daemon(recognizer) as daemon:
        blocker, *clients = [await connect(stream_url(daemon)) for _ in range(4)]
        ids = [(await recv_json(ws))["session_id"] for ws in (blocker, *clients)][1:]
        recognizer.fail_on.add(ids[1])  # every window of this session raises
        recognizer.hold()  # the worker waits in a batch of the blocker's ...
        await send_audio(blocker, jfk_audio[: 3 * SR])
        await asyncio.to_thread(recognizer.entered.wait)
        early = []
        for ws in clients:  # ... so that the next batch holds the first window of the others
            await send_audio(ws, jfk_audio[: 6 * SR])
            await ws.send(PING)  # answered once the audio before it was fed: its request is queued
            early.append(await read_until(ws, lambda m: m["type"] == "error"))
        # the first client's request closes its utterance (JFK pauses): a turn's final waits for
        # it, so it runs at once on the spare thread (held too); the other two wait together
        assert daemon.ctx.worker.pending == 2
        recognizer.release()
        for ws in (blocker, clients[0], clients[2]):
            await ws.send(EOF)
        ends = await asyncio.gather(*(read_to_close(ws) for ws in clients))
        results = [a + b for a, b in zip(early, ends, strict=True)]
        await read_to_close(blocker)
        assert len(daemon.ctx.sessions) == 0
    # (the blocker's endpoint request may join them, its eof read before the batch was taken)
    shared = next(batch for batch in recognizer.batches if ids[1] in batch)  # (then run one by one)
    assert ids[2] in shared, "the poisoned window shared a batch with another session's"
    poisoned = results[1]
    assert clients[1].close_code == 1011
    errors = [m for m in poisoned if m["type"] == "error" and m["code"] != "unknown_message"]
    assert [e["code"] for e in errors] == ["internal_error"], errors
    assert poisoned[-1]["type"] == "closed" and poisoned[-1]["reason"] == "internal_error"
    for i in (0, 2):
        assert clients[i].close_code == 1000 and results[i][-1]["reason"] == "eof"
        assert not [m for m in results[i] if m["type"] == "error" and m["code"] != "unknown_message"]
        numbers = final_numbers(results[i])  # (once each, in order)
        assert set(spoken_in_speech(jfk_audio[: 6 * SR])) <= set(numbers), "every word to the end"


@on_clock_loop
async def test_a_window_that_fails_after_the_eof_still_fails_the_session_with_1011(jfk_audio: np.ndarray) -> None:
    recognizer = TimedRecognizer()
    async with running_daemon(recognizer) as daemon:
        ws = await connect(stream_url(daemon))
        session_id = (await recv_json(ws))["session_id"]
        await send_audio(ws, jfk_audio[: 3 * SR])
        await ws.send(PING)
        heard = await read_until(ws, lambda m: m["type"] == "error")  # its audio was fed
        recognizer.fail_on.add(session_id)  # from its last requests on, while it drains
        await ws.send(EOF)
        messages = heard + await read_to_close(ws)
    assert ws.close_code == 1011
    errors = [m["code"] for m in messages if m["type"] == "error" and m["code"] != "unknown_message"]
    assert errors == ["internal_error"] and messages[-1]["reason"] == "internal_error"


@on_clock_loop
async def test_shutdown_with_the_worker_stuck_ends_at_its_deadline_with_finals_and_1001(
    jfk_audio: np.ndarray,
) -> None:
    recognizer = TimedRecognizer()
    timeout = 10.0
    try:
        async with running_daemon(recognizer, shutdown_timeout_s=timeout, max_batch=2) as daemon:
            clients = [await connect(stream_url(daemon)) for _ in range(4)]
            for ws in clients:
                await recv_json(ws)
                await send_audio(ws, jfk_audio[: 3 * SR])
            before = [await read_until(ws, is_partial) for ws in clients]
            recognizer.hold()  # the next batch never ends: the worker is saturated from now on
            for ws in clients:
                await send_audio(ws, jfk_audio[3 * SR : 5 * SR])
            await asyncio.to_thread(recognizer.entered.wait)
            for ws, messages in zip(clients, before, strict=True):  # each one's audio was fed
                await ws.send(PING)
                messages += (await read_until(ws, lambda m: m["type"] == "error"))[:-1]
            assert daemon.ctx.worker.pending > 0, "requests wait behind the stuck batch"
            shutdown = asyncio.create_task(daemon.shutdown())
            await daemon.ctx.shutdown.wait()  # begun: its deadline runs from here
            finish = daemon.ctx.shutdown.finish_s
            advance(timeout - 2 * finish + 0.1)  # past the recognition deadline, before the end
            results = await asyncio.gather(*(read_to_close(ws) for ws in clients))
            advance(2 * finish)  # the deadline: the daemon stops without waiting for the batch
            await shutdown
            assert not recognizer._gate.is_set(), "the shutdown ended while the batch was still under way"
    finally:
        recognizer.release()
    for ws, early, messages in zip(clients, before, results, strict=True):
        assert ws.close_code == 1001
        assert messages[-1]["type"] == "closed" and messages[-1]["reason"] == "shutdown"
        assert messages[-1]["audio_seconds"] == pytest.approx(5.0, abs=0.01)
        numbers = final_numbers(early + messages)
        assert numbers == list(range(len(numbers)))
        heard = {int(w["word"].removeprefix("w")) for w in early[-1]["words"]}
        assert heard and heard <= set(numbers), "the words heard became finals"
        last = [m for m in messages if m["type"] == "final"][-1]
        assert last["endpoint"]


# -- the real model ---------------------------------------------------------------------------------


class PoisonedRecognizer:
    """The real recogniser, except that a batch holding a window of a poisoned session raises
    (what a window the model cannot take does); ``poison`` is called from the test's thread."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._poisoned: set[object] = set()
        self._lock = threading.Lock()
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def poison(self, key: object) -> None:
        with self._lock:
            self._poisoned.add(key)

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        with self._lock:
            poisoned = any(r.key in self._poisoned for r in requests)
        if poisoned:
            self.failed += 1
            raise FloatingPointError("poisoned window")
        return self._inner.recognize(requests)


@pytest.mark.slow
def test_a_poisoned_window_with_the_real_model(serving_model, clips) -> None:  # type: ignore[no-untyped-def]
    from streamwhisper.audio.files import load_audio

    names = ["en_jfk", "en_lj_LJ001-0016", "en_arctic_aew_a0001"]
    audio = {n: load_audio(clips[n].wav) for n in names}
    victim = names[1]
    wrapped: list[PoisonedRecognizer] = []

    def wrap(recognizer: Any) -> PoisonedRecognizer:
        wrapped.append(PoisonedRecognizer(recognizer))
        return wrapped[0]

    async def client(url: str, name: str) -> tuple[list[Any], int | None]:
        async with StreamClient.connect(url) as c:
            assert c.ready is not None
            x = audio[name]
            with contextlib.suppress(ConnectionClosed):  # the poisoned session is closed under it
                for i in range(0, len(x), 1600):
                    if name == victim and i == 3 * SR:
                        wrapped[0].poison(c.ready.session_id)
                    await c.send_audio(x[i : i + 1600])
                    await asyncio.sleep(0.05)  # 2x real time
                await c.eof()
            return [m async for m in c], c.close_code

    with LiveServer(serving_model, wrap=wrap) as server:

        async def run() -> list[tuple[list[Any], int | None]]:
            return await asyncio.gather(*(client(server.url, n) for n in names))

        results = dict(zip(names, asyncio.run(run()), strict=True))
        assert server.inspect(lambda d: len(d.ctx.sessions)) == 0
    assert wrapped[0].failed >= 1
    messages, code = results[victim]
    assert code == 1011, messages
    assert [m.code for m in messages if isinstance(m, Error)] == ["internal_error"]
    assert isinstance(messages[-1], Closed) and messages[-1].reason == "internal_error"
    for name in names:
        if name == victim:
            continue
        messages, code = results[name]
        text = " ".join(m.text for m in messages if isinstance(m, Final) and m.text)
        assert code == 1000 and isinstance(messages[-1], Closed) and messages[-1].reason == "eof"
        assert not [m for m in messages if isinstance(m, Error)]
        wer = word_error_rate([clips[name].reference], [text])
        assert wer <= 0.35, f"{name}: WER {wer:.2f}: {text!r}"
