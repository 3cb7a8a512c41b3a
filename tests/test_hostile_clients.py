"""Hostile and broken clients against the real Daemon on port 0: a flood of connection attempts
at ten times ``max_sessions``, and keepalive pings while the inference worker is saturated.

The live sessions beside them must keep their transcripts (the fake recogniser's words, each
once, in order). The worker is held and released by the test, and the clock of the loop (the
heartbeat's, the limits') moves when the test calls ``advance``: nothing sleeps. Silent and
slowloris clients and oversized request heads are in tests/test_http_front.py, a client that
never reads in tests/test_session.py and tests/test_server_fuzz.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import WSMsgType
from runtime_fakes import (
    SR,
    TimedRecognizer,
    advance,
    final_numbers,
    is_partial,
    on_clock_loop,
    raw_websocket,
    read_to_close,
    read_until,
    recv_json,
    running_daemon,
    send_audio,
    server_frame,
    stream_url,
)
from websockets.asyncio.client import connect

from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.runtime.http import HEARTBEAT_S

pytestmark = pytest.mark.timeout(60)  # a broken protection hangs its test instead of failing it

HOLD = "endpointing_ms=5000"  # no VAD endpoint inside jfk's pauses: only eof ends the utterance
EOF = json.dumps({"type": "eof"})


@on_clock_loop
async def test_ten_times_max_sessions_at_once_are_refused_and_live_sessions_keep_their_transcripts(
    jfk_audio: np.ndarray,
) -> None:
    async with running_daemon(TimedRecognizer(), max_sessions=3) as daemon:
        url = stream_url(daemon, HOLD)
        async with connect(url) as alone:  # the transcript of jfk with nobody else around
            await recv_json(alone)
            await send_audio(alone, jfk_audio[: 5 * SR])
            heard = await read_until(alone, is_partial)
            await send_audio(alone, jfk_audio[5 * SR :])
            await alone.send(EOF)
            expected = final_numbers(heard + await read_to_close(alone))
        live = [await connect(url) for _ in range(3)]
        early = []  # on a slow machine a final may come before the first partial
        for ws in live:
            await recv_json(ws)
            await send_audio(ws, jfk_audio[: 5 * SR])
            early.append(await read_until(ws, is_partial))  # mid-utterance when the flood comes

        async def attempt() -> tuple[list[dict[str, Any]], int | None]:
            async with connect(url) as ws:
                first = await recv_json(ws)
                assert first == first | {"type": "error", "code": "over_capacity"}
                return await read_to_close(ws), ws.close_code

        refusals = await asyncio.gather(*(attempt() for _ in range(30)))
        assert refusals == [([], 1013)] * 30
        for ws in live:
            await send_audio(ws, jfk_audio[5 * SR :])
            await ws.send(EOF)
        transcripts = [heard + await read_to_close(ws) for heard, ws in zip(early, live, strict=True)]
        for ws in live:
            assert ws.close_code == 1000
            await ws.close()
        metrics = daemon.metrics.render().decode()
    for messages in transcripts:
        assert final_numbers(messages) == expected
        assert messages[-1] == messages[-1] | {"type": "closed", "reason": "eof", "audio_seconds": 11.0}
    assert 'streamwhisper_sessions_refused_total{reason="over_capacity"} 30.0' in metrics
    assert "streamwhisper_sessions_accepted_total 4.0" in metrics


async def _control(ws: aiohttp.ClientWebSocketResponse, texts: list[dict[str, Any]]) -> aiohttp.WSMessage:
    """The next message that is not text (the texts are kept in ``texts``)."""
    while (message := await ws.receive()).type is WSMsgType.TEXT:
        texts.append(json.loads(message.data))
    return message


async def _server_has_read_all(ws: aiohttp.ClientWebSocketResponse, texts: list[dict[str, Any]]) -> None:
    """Ping the server and wait for its pong: it answers once it has read everything sent before."""
    await ws.ping(b"sync")
    message = await _control(ws, texts)
    assert message.type is WSMsgType.PONG and message.data == b"sync", message


@on_clock_loop
async def test_keepalive_pings_are_answered_while_the_worker_is_saturated(jfk_audio: np.ndarray) -> None:
    """Four sessions' requests wait at a worker held inside a batch, twice what it takes at once
    (max_batch 2), for five heartbeats. Clients that answer pings (and send nothing else) stay;
    one that answers nothing is dropped by the heartbeat. Then the worker is released and every
    healthy session gets its whole transcript."""
    recognizer = TimedRecognizer()
    async with (
        running_daemon(recognizer, max_sessions=5, max_batch=2, idle_timeout_s=0) as daemon,
        aiohttp.ClientSession() as http,
    ):
        url = stream_url(daemon, HOLD)
        clients = [await http.ws_connect(url, autoping=False) for _ in range(4)]
        texts: list[list[dict[str, Any]]] = [[] for _ in clients]
        silent, silent_writer = await raw_websocket(daemon.port)  # never reads, never answers
        recognizer.hold()
        try:
            for ws in clients:
                await ws.send_bytes(float32_to_pcm_s16le(jfk_audio[: 6 * SR]))
            assert await asyncio.to_thread(recognizer.entered.wait, 10)
            for ws, seen in zip(clients, texts, strict=True):  # every session has submitted its request
                await _server_has_read_all(ws, seen)
            held, waiting = len(recognizer.batches[-1]), daemon.ctx.worker.pending
            assert held <= 2 and held + waiting == 4, (held, waiting)
            assert len(daemon.ctx.sessions) == 5
            for _ in range(5):
                advance(HEARTBEAT_S + 2)  # the heartbeat's timers round up to whole seconds
                for ws, seen in zip(clients, texts, strict=True):
                    ping = await _control(ws, seen)
                    assert ping.type is WSMsgType.PING, ping
                    await ws.pong(ping.data)
                    await _server_has_read_all(ws, seen)  # the pong arrived before the clock moves on
            assert len(daemon.ctx.sessions) == 4, "the silent client was dropped"
            assert not any(ws.closed for ws in clients)
        finally:
            recognizer.release()
        opcodes = []
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                opcodes.append((await server_frame(silent))[0])
        assert opcodes[0] == 1 and 9 in opcodes, opcodes  # its ready message, pings, then the connection closed
        silent_writer.close()
        for ws, seen in zip(clients, texts, strict=True):
            await ws.send_str(EOF)
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    seen.append(json.loads(message.data))
            assert ws.close_code == 1000
    for seen in texts:
        assert seen[0]["type"] == "ready"
        assert seen[-1] == seen[-1] | {"type": "closed", "reason": "eof", "audio_seconds": 6.0}
        assert final_numbers(seen)[-1] >= 11, "the words up to 6 s became finals"
