"""Session resume without the model: the real Daemon on port 0 in the test's loop, the real
``StreamClient`` (or a bare websockets client), real speech for the VAD and the fake recogniser
that hears a word every half second (``w<i>``, named by its time in the session). Connections are
cut with a TCP reset; the grace period runs out when the test moves the loop's clock."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
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

from streamwhisper.client import Closed, StreamClient
from streamwhisper.events import Final
from streamwhisper.runtime.resume import ReplayBuffer
from streamwhisper.runtime.server import Daemon

pytestmark = pytest.mark.timeout(30)

HOLD = "endpointing_ms=5000"  # no VAD endpoint inside jfk's pauses: finals come from force commits and eof


def reset(ws: ClientConnection) -> None:
    """Cut the connection with a TCP reset: no close frame, as when a network drops."""
    sock = ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.transport.abort()


async def detached(daemon: Daemon) -> None:
    """Until the server has noticed the cut (no event announces the server's side of a reset)."""
    while any(s.connected for s in daemon.ctx.sessions):  # noqa: ASYNC110
        await asyncio.sleep(0)


async def sessions_gone(daemon: Daemon) -> None:
    while daemon.ctx.sessions:  # noqa: ASYNC110
        await asyncio.sleep(0)


def resume_url(daemon: Daemon, token: str, last_seq: int) -> str:
    return stream_url(daemon, f"resume={token}&last_seq={last_seq}")


def numbers(finals: list[Final]) -> list[int]:
    return [int(w.word.strip().removeprefix("w")) for f in finals for w in f.words]


def resumes(daemon: Daemon, outcome: str) -> float:
    return daemon.metrics.resumes.labels(outcome)._value.get()


def test_the_replay_buffer_is_bounded_and_knows_what_it_lost() -> None:
    replay = ReplayBuffer(3)
    for seq in range(5):
        replay.add(seq, f"final {seq}")
    assert len(replay) == 3 and replay.since(2) == ["final 3", "final 4"]
    assert replay.since(0) is None, "final 1 was dropped: a client that has only final 0 cannot resume"
    replay.ack(3)
    assert replay.since(3) == ["final 4"] and len(replay) == 1


@on_clock_loop
async def test_the_client_resumes_a_reset_connection_and_gets_every_final_once(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon:
        async with StreamClient.connect(stream_url(daemon), endpointing_ms=5000) as client:
            assert client.ready is not None and client.ready.resume_token and client.ready.resume_grace_s == 30
            cut = 6 * 16000
            for i in range(0, cut, 1600):
                await client.send_audio(jfk_audio[i : i + 1600])
            first = await client.recv()
            while not isinstance(first, Final):
                first = await client.recv()
            assert client._ws is not None
            reset(client._ws)
            await detached(daemon)  # the session waits for its client, recognising what it has
            for i in range(cut, len(jfk_audio), 1600):
                await client.send_audio(jfk_audio[i : i + 1600])  # the first send repairs the connection
            await client.eof()
            messages = [first] + [m async for m in client]
        assert [r.resumed for r in client.reconnects] == [True]
        assert resumes(daemon, "resumed") == 1
    finals = [m for m in messages if isinstance(m, Final)]
    got = numbers(finals)
    assert got == sorted(set(got)), f"a word twice or out of order: {got}"
    assert got[-1] >= 20 and len(got) >= 19, f"speech up to 10.5 s became finals: {got}"
    closed = messages[-1]
    assert isinstance(closed, Closed) and closed.audio_seconds == pytest.approx(11.0, abs=0.01)


async def open_session(daemon: Daemon, audio: np.ndarray) -> tuple[ClientConnection, dict[str, Any], list[dict]]:
    ws = await connect(stream_url(daemon, HOLD))
    ready = await recv_json(ws)
    await send_audio(ws, audio)
    finals = await read_until(ws, lambda m: m["type"] == "final" and bool(m["words"]))
    return ws, ready, finals


@on_clock_loop
async def test_a_session_whose_client_does_not_come_back_ends_after_the_grace_period(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), resume_grace_s=5, idle_timeout_s=0) as daemon:
        ws, ready, _ = await open_session(daemon, jfk_audio[: 6 * 16000])
        reset(ws)
        await detached(daemon)
        advance(4)  # within the grace period: still there
        async with connect(resume_url(daemon, ready["resume_token"], -1)) as again:
            resumed = await recv_json(again)
            assert resumed["type"] == "resumed" and resumed["audio_frames"] == 6 * 16000
            reset(again)
        await detached(daemon)
        advance(6)  # a new grace period began at the second cut; now it is over
        await sessions_gone(daemon)
        async with connect(resume_url(daemon, ready["resume_token"], -1)) as late:
            messages = await read_to_close(late)
            assert [m["code"] for m in messages] == ["resume_failed"] and late.close_code == 1008
        assert resumes(daemon, "expired") == 1 and resumes(daemon, "refused") == 1


@on_clock_loop
async def test_a_resume_replays_the_finals_after_last_seq_and_takes_over_a_live_connection(
    jfk_audio: np.ndarray,
) -> None:
    async with running_daemon(TimedRecognizer()) as daemon:
        old, ready, finals = await open_session(daemon, jfk_audio[: 6 * 16000])
        last = finals[-1]
        await old.send(json.dumps({"type": "ack", "seq": last["seq"] - 1}))
        # the old connection is alive as far as the server knows (a half-open TCP connection)
        async with connect(resume_url(daemon, ready["resume_token"], last["seq"] - 1)) as new:
            resumed = await recv_json(new)
            assert resumed["type"] == "resumed" and resumed["session_id"] == ready["session_id"]
            replayed = await recv_json(new)
            assert replayed == last, "the final after last_seq is sent again, as it was"
            await read_to_close(old)
            assert old.close_code == 1008 and old.close_reason == "resumed_elsewhere"
            await send_audio(new, jfk_audio[6 * 16000 :])
            await new.send(json.dumps({"type": "eof"}))
            rest = await read_to_close(new)
            assert new.close_code == 1000 and rest[-1]["type"] == "closed"
        words = [w["word"] for m in finals + rest if m["type"] == "final" for w in m["words"]]
        got = [int(w.removeprefix("w")) for w in words]
        assert got == sorted(set(got)) and got[-1] >= 20


@on_clock_loop
async def test_a_resume_is_refused_when_its_finals_are_no_longer_kept(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), max_replay=1) as daemon:
        ws, ready, _ = await open_session(daemon, jfk_audio[: 6 * 16000])
        await ws.send(json.dumps({"type": "finalize"}))
        await read_until(ws, lambda m: m["type"] == "final" and m["endpoint"])  # a second final: the first is dropped
        reset(ws)
        await detached(daemon)
        async with connect(resume_url(daemon, ready["resume_token"], -1)) as late:
            messages = await read_to_close(late)
        assert [m["code"] for m in messages] == ["resume_failed"] and late.close_code == 1008
        assert "no longer kept" in messages[0]["message"]


@on_clock_loop
async def test_a_client_that_closes_on_purpose_ends_its_session(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon:
        ws, ready, _ = await open_session(daemon, jfk_audio[: 3 * 16000])
        await ws.close()  # a close frame: the client is done, no resume expected
        await sessions_gone(daemon)
        async with connect(resume_url(daemon, ready["resume_token"], -1)) as late:
            messages = await read_to_close(late)
        assert [m["code"] for m in messages] == ["resume_failed"]


@on_clock_loop
async def test_other_dialects_do_not_offer_resume(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer()) as daemon:
        async with connect(f"ws://127.0.0.1:{daemon.port}/v1/listen?encoding=linear16&sample_rate=16000") as ws:
            await send_audio(ws, jfk_audio[: 3 * 16000])
            reset(ws)
        await sessions_gone(daemon)  # a lost Deepgram session ends at once, as before
