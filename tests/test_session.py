"""Sessions over real sockets: the real Daemon on port 0 in the test's loop, a websockets client,
real speech (jfk, for the real VAD) and a fake recogniser. Limits fire when the test moves the
loop's clock forward (``advance``); nothing sleeps."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import numpy as np
import pytest
from runtime_fakes import (
    TimedRecognizer,
    advance,
    on_clock_loop,
    read_to_close,
    read_until,
    recv_json,
    running_daemon,
    send_audio,
    stream_url,
)
from websockets.asyncio.client import ClientConnection, connect

pytestmark = pytest.mark.timeout(30)  # a broken session hangs its test instead of failing it

HOLD = "endpointing_ms=5000"  # no VAD endpoint inside jfk's pauses: only eof/finalize/limits end utterances


def kinds(messages: list[dict[str, Any]]) -> list[str]:
    return [m["type"] for m in messages]


def final_words(messages: list[dict[str, Any]]) -> list[str]:
    return [w["word"] for m in messages if m["type"] == "final" for w in m["words"]]


def check_finals(messages: list[dict[str, Any]]) -> list[int]:
    """Final words are the fake speaker's words, each once, in order; returns their numbers."""
    numbers = [int(w.removeprefix("w")) for w in final_words(messages)]
    assert numbers and numbers == sorted(set(numbers)), numbers
    return numbers


async def answers(ws: ClientConnection) -> bool:
    """Whether the session still answers messages: two round trips, so that any timer made due
    by the last ``advance`` has fired before the second is answered."""
    for _ in range(2):
        await ws.send(json.dumps({"type": "nonsense"}))
        reply = (await read_until(ws, lambda m: m["type"] == "error"))[-1]
        if reply["code"] != "unknown_message":
            return False
    return True


def is_partial(m: dict[str, Any]) -> bool:
    return m["type"] == "partial" and bool(m["text"])


@on_clock_loop
async def test_audio_then_eof_gives_partials_finals_closed_and_1000(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(stream_url(daemon)) as ws:
        ready = await recv_json(ws)
        assert ready["type"] == "ready" and ready["model"] == "fake"
        await send_audio(ws, jfk_audio[: 3 * 16000])
        early = await read_until(ws, is_partial)  # the first window's hypothesis, before any eof
        await send_audio(ws, jfk_audio[3 * 16000 :])
        await ws.send(json.dumps({"type": "eof"}))
        messages = early + await read_to_close(ws)
        assert ws.close_code == 1000
    assert "final" in kinds(messages)
    assert kinds(messages)[-1] == "closed" and kinds(messages).count("closed") == 1
    closed = messages[-1]
    assert closed["reason"] == "eof" and closed["audio_seconds"] == pytest.approx(11.0, abs=0.01)
    numbers = check_finals(messages)
    assert closed["words"] == len(numbers) and numbers[-1] >= 19, "speech up to 10 s became finals"


@on_clock_loop
async def test_a_config_message_after_audio_is_out_of_order_and_closes_1007(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(stream_url(daemon)) as ws:
        await recv_json(ws)
        await ws.send(json.dumps({"type": "config", "sample_rate": 8000}))  # before audio: accepted
        assert (await recv_json(ws))["config"]["sample_rate"] == 8000
        await send_audio(ws, jfk_audio[:8000])
        await ws.send(json.dumps({"type": "config", "sample_rate": 16000}))
        messages = await read_to_close(ws)
        assert ws.close_code == 1007
    errors = [m for m in messages if m["type"] == "error"]
    assert [e["code"] for e in errors] == ["out_of_order"]
    assert messages[-1] == messages[-1] | {"type": "closed", "reason": "out_of_order"}


@on_clock_loop
async def test_finalize_makes_the_utterance_so_far_final_at_once(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon, connect(stream_url(daemon, HOLD)) as ws:
        await recv_json(ws)
        await send_audio(ws, jfk_audio[: int(5.5 * 16000)])
        await read_until(ws, is_partial)
        await ws.send(json.dumps({"type": "finalize"}))
        # no more audio and no eof: only the finalize can end the utterance now
        messages = await read_until(ws, lambda m: m["type"] == "final" and m["endpoint"])
        forced = messages[-1]
        assert 4.0 <= forced["end"] <= 5.5
        await ws.send(json.dumps({"type": "eof"}))
        rest = await read_to_close(ws)
    check_finals(messages + rest)
    assert rest[-1]["type"] == "closed" and ws.close_code == 1000


@on_clock_loop
async def test_idle_timeout_closes_a_silent_session_with_1008(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), idle_timeout_s=60) as daemon, connect(stream_url(daemon, HOLD)) as ws:
        await recv_json(ws)
        await send_audio(ws, jfk_audio[: 3 * 16000])
        await read_until(ws, is_partial)
        advance(59)
        assert await answers(ws)  # a message restarts the idle clock
        advance(59)
        assert await answers(ws)
        advance(61)
        messages = await read_to_close(ws)
        assert ws.close_code == 1008
    assert [m["code"] for m in messages if m["type"] == "error"] == ["idle_timeout"]
    assert messages[-1] == messages[-1] | {"type": "closed", "reason": "idle_timeout"}
    check_finals(messages)  # the audio it had became finals before the close


@on_clock_loop
async def test_max_session_s_ends_a_session_with_its_finals_and_1008(jfk_audio: np.ndarray) -> None:
    async with (
        running_daemon(TimedRecognizer(), max_session_s=600, idle_timeout_s=0) as daemon,
        connect(stream_url(daemon, HOLD)) as ws,
    ):
        await recv_json(ws)
        await send_audio(ws, jfk_audio[: 4 * 16000])
        await read_until(ws, is_partial)
        advance(599)
        assert await answers(ws), "still open just before the limit"
        advance(2)
        messages = await read_to_close(ws)
        assert ws.close_code == 1008
    assert [m["code"] for m in messages if m["type"] == "error"] == ["session_too_long"]
    assert messages[-1] == messages[-1] | {"type": "closed", "reason": "session_too_long"}
    assert check_finals(messages)[-1] >= 5, "the audio up to 4 s became finals"


@on_clock_loop
async def test_sessions_beyond_max_sessions_are_refused_with_1013() -> None:
    async with running_daemon(TimedRecognizer(), max_sessions=1) as daemon:
        async with connect(stream_url(daemon)) as first:
            assert (await recv_json(first))["type"] == "ready"
            async with connect(stream_url(daemon)) as second:
                refused = await read_to_close(second)
                assert [m["code"] for m in refused] == ["over_capacity"] and second.close_code == 1013
            await first.send(json.dumps({"type": "eof"}))
            assert (await read_to_close(first))[-1]["type"] == "closed"
        async with connect(stream_url(daemon)) as third:  # the place is free again
            assert (await recv_json(third))["type"] == "ready"


@on_clock_loop
async def test_shutdown_gives_every_open_session_its_finals_closed_and_1001(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon:
        url = stream_url(daemon, HOLD)
        clients = [await connect(url) for _ in range(2)]
        for ws, seconds in zip(clients, (4.0, 6.0), strict=True):
            await recv_json(ws)
            await send_audio(ws, jfk_audio[: int(seconds * 16000)])
            await read_until(ws, is_partial)  # mid-utterance: its end is not final yet
        shutdown = asyncio.create_task(daemon.shutdown())
        results = await asyncio.gather(*(read_to_close(ws) for ws in clients))
        await shutdown
        assert [ws.close_code for ws in clients] == [1001, 1001]
        with pytest.raises(OSError):  # the server has stopped
            await connect(url)
    for messages, seconds in zip(results, (4.0, 6.0), strict=True):
        assert messages[-1] == messages[-1] | {"type": "closed", "reason": "shutdown"}
        assert messages[-1]["audio_seconds"] == pytest.approx(seconds, abs=0.01)
        last = [m for m in messages if m["type"] == "final"][-1]
        assert last["endpoint"] and last["end"] >= seconds - 1.0, "the pending audio became finals"
        check_finals(messages)


@on_clock_loop
async def test_a_client_that_never_reads_is_closed_while_another_is_served(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), max_outbox=8) as daemon:
        url = stream_url(daemon)
        # a small receive buffer, so that what the client does not read fills it soon
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", daemon.port))
        async with connect(url, sock=sock, max_queue=1) as lazy:
            session_id = (await recv_json(lazy))["session_id"]
            (session,) = [s for s in daemon.ctx.sessions if s.info.id == session_id]
            sent = 0
            while not session.outbox.overflowed.is_set():  # every message is answered, never read
                await lazy.send(json.dumps({"type": "nonsense"}))
                await asyncio.sleep(0)  # let the server read it (a yield, no time passes)
                sent += 1
                assert sent < 100_000, "the outbox never filled"
            async with connect(url) as other:  # meanwhile, another client is served in full
                await recv_json(other)
                await send_audio(other, jfk_audio[: 3 * 16000])
                await other.send(json.dumps({"type": "eof"}))
                served = await read_to_close(other)
                assert served[-1]["type"] == "closed" and other.close_code == 1000
            assert session.outbox.peak <= 8
            left = await read_to_close(lazy)  # reading at last: what was sent, then the close
        metrics = daemon.metrics.render().decode()
    assert 'streamwhisper_errors_total{kind="client_not_reading"} 1.0' in metrics
    assert {m["code"] for m in left} == {"unknown_message"}, "nothing queued after the overflow is sent"
    assert len(left) < sent and lazy.close_code == 1008
