"""Every advertised limit against the real Daemon on port 0, each with a test that fails when the
limit is taken out: ``max_message_bytes``, refusal under lag (``refuse_lag_s``), step degradation
under a saturated worker (``degrade_lag_s``), and TLS (``tls_cert``/``tls_key``) with the real model.

``max_sessions``, ``idle_timeout_s`` and ``max_session_s`` are in tests/test_session.py, the
handshake deadline and request-head limits in tests/test_http_front.py, floods and keepalive
under load in tests/test_hostile_clients.py. The fake recogniser's worker is held and released
by the test, and lags grow when the test moves the loop's clock (``advance``): nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from runtime_fakes import (
    SR,
    TimedRecognizer,
    advance,
    final_numbers,
    is_partial,
    masked_frame_start,
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
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidMessage

from benchmarks.scoring import word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.runtime.server import Daemon

pytestmark = pytest.mark.timeout(60)  # a broken limit hangs its test instead of failing it

LIMIT = 4096  # max_message_bytes of the daemons here
HOLD = "endpointing_ms=5000"  # no VAD endpoint inside jfk's pauses: only eof and limits end utterances
EOF = json.dumps({"type": "eof"})


def error_codes(messages: list[dict[str, Any]]) -> list[str]:
    return [m["code"] for m in messages if m["type"] == "error"]


async def readiness(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{daemon.port}/readyz") as r:
        return r.status, await r.json()


# --- max_message_bytes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "compression"),
    [(LIMIT + 1, None), (LIMIT + 1, "deflate"), (1024 * LIMIT, "deflate")],
    ids=["one-byte-over", "one-byte-over-compressed", "4-MiB"],
)
@on_clock_loop
async def test_a_message_over_max_message_bytes_gets_1009_and_none_of_it_is_heard(
    jfk_audio: np.ndarray, size: int, compression: str | None
) -> None:
    """The oversized message is real speech that follows on: had any of it been read as audio,
    the stream would be longer and its finals would hold the words spoken in it. The limit is
    on the message as sent, compressed (permessage-deflate) or not. The client is still sending
    the 4 MiB one when it is refused: it gets every answer all the same."""
    async with (
        running_daemon(TimedRecognizer(), max_message_bytes=LIMIT) as daemon,
        connect(stream_url(daemon, HOLD), max_size=None, compression=compression) as ws,
    ):
        await recv_json(ws)
        await send_audio(ws, jfk_audio[: 2 * SR])
        await read_until(ws, is_partial)
        speech = np.resize(jfk_audio[2 * SR :], size // 2 + 1)  # the clip goes on, looped to fill it
        sending = asyncio.create_task(ws.send(float32_to_pcm_s16le(speech)[:size]))
        messages = await read_to_close(ws)
        await asyncio.gather(sending, return_exceptions=True)
        assert ws.close_code == 1009
    assert error_codes(messages) == ["message_too_big"]
    closed = messages[-1]
    assert closed == closed | {"type": "closed", "reason": "message_too_big", "audio_seconds": 2.0}
    numbers = final_numbers(messages)
    assert numbers == list(range(numbers[0], 4)), "the words of the first 2 s, and none after"
    assert 'streamwhisper_errors_total{kind="message_too_big"} 1.0' in daemon.metrics.render().decode()


@on_clock_loop
async def test_a_message_over_the_limit_is_refused_from_its_header_before_its_payload_arrives() -> None:
    """Nothing of an oversized message is buffered: the client declares 1 GB and sends 1 KB of
    it, and is answered at once; a server that waited for the payload would never answer."""
    async with running_daemon(TimedRecognizer(), max_message_bytes=LIMIT) as daemon, connect(stream_url(daemon)) as ws:
        await recv_json(ws)
        await ws.send(b"\0\0" * 1600)  # 0.1 s of audio first: it is heard
        ws.transport.write(masked_frame_start(1 << 30, 1024))
        messages = await read_to_close(ws)
        assert ws.close_code == 1009
    assert error_codes(messages) == ["message_too_big"]
    assert messages[-1] == messages[-1] | {"type": "closed", "reason": "message_too_big", "audio_seconds": 0.1}


@on_clock_loop
async def test_a_refused_client_still_sending_its_message_is_not_reset() -> None:
    """After the answer to an oversized message, the client may still be sending it (it cannot
    stop in the middle of a frame). The server half-closes and reads on, so that the client's
    bytes never meet a closed socket: that would make the kernel reset the connection, and a
    client reset before it has read the close frame (and the messages before it) loses them."""
    async with running_daemon(TimedRecognizer(), max_message_bytes=LIMIT) as daemon:
        reader, writer = await raw_websocket(daemon.port)
        opcode, ready = await server_frame(reader)
        assert opcode == 1 and json.loads(ready)["type"] == "ready"
        writer.write(masked_frame_start(1 << 30, 1024))
        frames = []
        while not frames or frames[-1][0] != 8:  # up to the close frame
            frames.append(await server_frame(reader))
        assert [json.loads(p)["type"] for _, p in frames[:-1]] == ["error", "closed"]
        assert int.from_bytes(frames[-1][1][:2], "big") == 1009
        assert await reader.read() == b"", "the server's side is closed"
        chunk = b"\0" * 65536
        for _ in range(64):  # 4 MiB more of the refused message
            writer.write(chunk)
            await writer.drain()  # a reset would raise here
        writer.close()
        await writer.wait_closed()


# --- refuse_lag_s and degrade_lag_s: a worker the test holds --------------------------------------


async def _lag_behind(daemon: Daemon, ws: ClientConnection, recognizer: TimedRecognizer, audio: np.ndarray) -> None:
    """Stream 3 s (answered at once), then hold the worker and stream 3 s more, until a request
    of this stream is held in the worker and the server has taken in all 6 s (the lag runs
    from when the audio arrived: audio still unread when the test moves the clock would arrive
    after it)."""
    await recv_json(ws)
    await send_audio(ws, audio[: 3 * SR])
    await read_until(ws, is_partial)
    recognizer.hold()
    await send_audio(ws, audio[3 * SR : 6 * SR])
    assert await asyncio.to_thread(recognizer.entered.wait, 10), "no request reached the worker"
    for _ in range(1000):  # the server reads on: yield to it (the clock stays where it is)
        if daemon.metrics.registry.get_sample_value("streamwhisper_audio_seconds_total") >= 6.0 - 1e-6:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the server did not take in the 6 s sent")


async def _finish(ws: ClientConnection) -> list[dict[str, Any]]:
    await ws.send(EOF)
    messages = await read_to_close(ws)
    assert ws.close_code == 1000 and messages[-1]["type"] == "closed"
    return messages


@on_clock_loop
async def test_new_sessions_are_refused_with_1013_overloaded_while_the_mean_lag_is_over_refuse_lag_s(
    jfk_audio: np.ndarray,
) -> None:
    recognizer = TimedRecognizer()
    async with running_daemon(recognizer, refuse_lag_s=4.0) as daemon:
        url = stream_url(daemon, HOLD)
        async with connect(url) as ws:
            try:
                await _lag_behind(daemon, ws, recognizer, jfk_audio)
                advance(3.0)  # the held request waits 3 s: under the limit
                status, ready = await readiness(daemon)
                assert status == 200 and ready["ready"] and 3.0 <= ready["mean_lag_s"] < 4.0, ready
                advance(2.0)  # now 5 s
                status, ready = await readiness(daemon)
                assert status == 503 and not ready["ready"] and ready["mean_lag_s"] >= 5.0, ready
                async with connect(url) as refused:
                    answer = await recv_json(refused)
                    assert answer == answer | {"type": "error", "code": "overloaded"}
                    assert await read_to_close(refused) == [] and refused.close_code == 1013
            finally:
                recognizer.release()
            messages = await _finish(ws)  # the lagging session itself loses nothing
        assert final_numbers(messages)[-1] >= 11, "its words up to 6 s became finals"
        async with connect(url) as again:  # the lag left with it
            assert (await recv_json(again))["type"] == "ready"
    assert 'streamwhisper_sessions_refused_total{reason="overloaded"} 1.0' in daemon.metrics.render().decode()


async def _status_after_holding(audio: np.ndarray, held_s: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Hold one stream's request in the worker for ``held_s`` seconds of the loop's clock, then
    release it: the first ``status`` message after that, and all the stream's messages."""
    recognizer = TimedRecognizer()
    async with running_daemon(recognizer, degrade_lag_s=1.5) as daemon, connect(stream_url(daemon, HOLD)) as ws:
        try:
            await _lag_behind(daemon, ws, recognizer, audio)
            advance(held_s)
        finally:
            recognizer.release()
        messages = await read_until(ws, lambda m: m["type"] == "status")
        status = messages[-1]
        messages += await _finish(ws)
    return status, messages


@on_clock_loop
async def test_a_session_lagging_behind_a_saturated_worker_steps_longer_and_says_so(jfk_audio: np.ndarray) -> None:
    """Held 6 s: the lag is 6 s and the worker was busy all of the last 5 s (utilisation 1)."""
    status, messages = await _status_after_holding(jfk_audio, 6.0)
    assert status["lag"] >= 6.0
    assert status["step"] == pytest.approx(0.75), "min_step_s 0.5 x 1.5"
    assert final_numbers(messages)[-1] >= 11, "nothing is lost to the longer steps"


@on_clock_loop
async def test_a_lag_without_a_saturated_worker_is_reported_but_keeps_the_step(jfk_audio: np.ndarray) -> None:
    """Held 2 s: over degrade_lag_s, but the worker was busy for 2 s of the last 5 (0.4), so
    longer steps would only add latency; the status message tells the lag, with the same step."""
    status, messages = await _status_after_holding(jfk_audio, 2.0)
    assert 2.0 <= status["lag"] < 3.0
    assert status["step"] == pytest.approx(0.5)
    assert final_numbers(messages)[-1] >= 11


# --- TLS ---------------------------------------------------------------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 and its key, made by the openssl binary."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl binary makes the test's certificate"
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.slow
def test_wss_with_a_self_signed_certificate_transcribes_and_plain_ws_is_refused(
    serving_model: Any, clips: dict[str, Any], jfk_audio: np.ndarray, tmp_path: Path
) -> None:
    from live_server import LiveServer

    cert, key = _self_signed(tmp_path)
    trusting = ssl.create_default_context(cafile=str(cert))

    async def session(url: str) -> tuple[list[dict[str, Any]], int | None]:
        async with connect(url + "/v1/stream", ssl=trusting, max_size=None) as ws:
            assert (await recv_json(ws))["type"] == "ready"
            await send_audio(ws, jfk_audio)
            await ws.send(EOF)
            return await read_to_close(ws), ws.close_code

    async def plain(url: str) -> None:
        async with connect(url + "/v1/stream", open_timeout=30):
            pass

    async def untrusting(url: str) -> None:
        async with connect(url + "/v1/stream", ssl=ssl.create_default_context(), open_timeout=30):
            pass

    with LiveServer(serving_model, tls_cert=str(cert), tls_key=str(key)) as server:
        assert server.inspect(lambda d: d.url) == f"wss://127.0.0.1:{server.port}"
        with pytest.raises((InvalidMessage, ConnectionClosed, OSError)):
            asyncio.run(plain(f"ws://127.0.0.1:{server.port}"))
        with pytest.raises(ssl.SSLCertVerificationError):  # the server presents the test's certificate
            asyncio.run(untrusting(f"wss://localhost:{server.port}"))
        messages, code = asyncio.run(session(f"wss://localhost:{server.port}"))
    assert code == 1000 and messages[-1] == messages[-1] | {"type": "closed", "reason": "eof"}
    text = " ".join(m["text"] for m in messages if m["type"] == "final")
    assert word_error_rate([clips["en_jfk"].reference], [text]) <= 0.2, text
    assert re.search(r"\bcountry\b", text.lower()), text
