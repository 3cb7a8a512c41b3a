"""The aiohttp front without the model: deadlines for slow or silent clients, oversized request
heads, and the OpenAI-compatible endpoints' refusals (errors in OpenAI's shape) next to a live
WebSocket session on the same port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import aiohttp
import numpy as np
import pytest
from runtime_fakes import (
    TimedRecognizer,
    advance,
    on_clock_loop,
    read_until,
    recv_json,
    running_daemon,
    send_audio,
    stream_url,
)
from websockets.asyncio.client import connect

from streamwhisper.runtime.server import Daemon

DEADLINE = 0.4  # handshake_timeout_s of the daemons here


async def _closed_by_server(daemon: Daemon, trickle: bytes = b"", every_s: float = 0.0) -> tuple[bytes, int]:
    """Open a raw connection, send ``trickle`` one byte per ``every_s`` seconds of the loop's
    clock; return what the server answered before it closed the connection and how many bytes
    had been sent by then."""
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
    sent = 0

    async def drip() -> None:
        nonlocal sent
        with contextlib.suppress(ConnectionError):  # the server dropped it
            for i in range(len(trickle)):
                writer.write(trickle[i : i + 1])
                await writer.drain()
                sent += 1
                advance(every_s)  # the slow client under test: a byte per interval
                await asyncio.sleep(0)

    dripping = asyncio.create_task(drip())
    try:
        async with asyncio.timeout(30):  # far beyond the deadline: only a missing one reaches it
            answer = await reader.read()
    except ConnectionResetError:  # dropped while the client was still sending: nothing answered
        answer = b""
    finally:
        dripping.cancel()
        writer.close()
    return answer, sent


@on_clock_loop
async def test_a_client_that_sends_nothing_is_dropped_at_the_handshake_deadline() -> None:
    async with running_daemon(TimedRecognizer(), handshake_timeout_s=DEADLINE) as daemon:
        answer, _ = await _closed_by_server(daemon)
        assert answer == b""


UPGRADE = (
    b"GET /v1/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


@pytest.mark.parametrize("request_line", [b"GET /healthz HTTP/1.1\r\nHost: x\r\n", UPGRADE], ids=["http", "upgrade"])
@on_clock_loop
async def test_a_client_sending_headers_a_byte_at_a_time_is_dropped(request_line: bytes) -> None:
    """Slowloris: 0.1 s a byte, so the head would take 40 s; the deadline is 0.4 s (of the
    loop's clock, which the client moves as it sends, and nothing waits for in real time)."""
    head = request_line + b"X-Slow: " + b"a" * 400 + b"\r\n\r\n"
    async with running_daemon(TimedRecognizer(), handshake_timeout_s=DEADLINE) as daemon:
        answer, sent = await _closed_by_server(daemon, head, every_s=0.1)
        assert answer == b""
        assert sent < len(head), "dropped before the headers were complete"
        assert not daemon.ctx.sessions
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{daemon.port}/healthz") as r:
            assert r.status == 200  # a well-behaved client still gets through


async def _raw_request(daemon: Daemon, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
    writer.write(head)
    await writer.drain()
    async with asyncio.timeout(30):
        answer = await reader.read()
    writer.close()
    return answer


@on_clock_loop
async def test_oversized_request_lines_and_headers_get_400() -> None:
    """Over 8190 bytes in the request line or a header, or over 100 headers (on an upgrade to a
    WebSocket too): 400, before any handler runs. Just under the limits, the request is served."""
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
    async with running_daemon(TimedRecognizer()) as daemon:
        line = await _raw_request(daemon, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        header = await _raw_request(daemon, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n")
        headers = await _raw_request(daemon, b"GET / HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        upgrade = await _raw_request(daemon, UPGRADE + b"X-Big: " + b"b" * 10_000 + b"\r\n\r\n")
        near = await _raw_request(daemon, b"GET /" + b"a" * 8000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert not daemon.ctx.sessions
    for answer, says in [
        (line, b"8190 bytes"),
        (header, b"8190 bytes"),
        (headers, b"Too many headers"),
        (upgrade, b"8190 bytes"),
    ]:
        assert re.match(rb"HTTP/1\.[01] 400 ", answer) and says in answer, answer[:200]
    assert re.match(rb"HTTP/1\.[01] 404 ", near), near[:200]


def _form(**fields: Any) -> aiohttp.FormData:
    form = aiohttp.FormData(default_to_multipart=True)
    for name, value in fields.items():
        if isinstance(value, bytes):
            form.add_field(name, value, filename="audio.wav", content_type="audio/wav")
        else:
            form.add_field(name, str(value))
    return form


async def _post(daemon: Daemon, data: Any, path: str = "/v1/audio/transcriptions", **headers: str) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{daemon.port}{path}"
    async with aiohttp.ClientSession() as http, http.post(url, data=data, headers=headers) as r:
        body = await r.text()
        return r.status, json.loads(body) if r.content_type == "application/json" else body


def _error(answer: tuple[int, Any]) -> tuple[int, str, str | None]:
    status, body = answer
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return status, error["type"], error["code"]


@on_clock_loop
async def test_rest_refusals_are_openai_errors_and_leave_a_live_session_alone(jfk_audio: np.ndarray) -> None:
    async with running_daemon(TimedRecognizer(), auth_token="k", max_upload_bytes=4096) as daemon:
        async with connect(stream_url(daemon, "token=k")) as ws:
            await recv_json(ws)
            await send_audio(ws, jfk_audio[: 3 * 16000])
            auth = {"Authorization": "Bearer k"}
            assert _error(await _post(daemon, _form(file=b"RIFF"), Authorization="Bearer no")) == (
                401,
                "invalid_request_error",
                "invalid_api_key",
            )
            assert _error(await _post(daemon, b"not a form", **auth)) == (
                400,
                "invalid_request_error",
                "invalid_content_type",
            )
            assert _error(await _post(daemon, _form(model="whisper-1"), **auth)) == (
                400,
                "invalid_request_error",
                "missing_required_parameter",
            )
            garbage = _form(file=b"\x00garbage" * 100, model="whisper-1")
            assert _error(await _post(daemon, garbage, **auth)) == (400, "invalid_request_error", "invalid_file_format")
            bad_format = _form(file=b"x", response_format="docx")
            assert _error(await _post(daemon, bad_format, **auth)) == (400, "invalid_request_error", "invalid_value")
            big = _form(file=b"\x00" * 100_000)
            assert _error(await _post(daemon, big, **auth)) == (413, "invalid_request_error", "file_too_large")
            english_only = _form(file=b"x")  # the fake model is English-only: it cannot translate
            answer = await _post(daemon, english_only, "/v1/audio/translations", **auth)
            assert _error(answer) == (400, "invalid_request_error", "translation_not_supported")
            status, _ = await _post(daemon, _form(file=b"x"), "/v1/models", **auth)
            assert status == 405
            # the live session saw none of it
            await ws.send('{"type": "nonsense"}')
            assert (await read_until(ws, lambda m: m["type"] == "error"))[-1]["code"] == "unknown_message"
        assert not daemon.ctx.sessions


@on_clock_loop
async def test_uploads_over_the_concurrency_limit_get_429() -> None:
    async with running_daemon(TimedRecognizer(), max_uploads=0) as daemon:
        answer = await _post(daemon, _form(file=b"x"))
        assert _error(answer) == (429, "rate_limit_error", "rate_limit_exceeded")
        url = f"http://127.0.0.1:{daemon.port}/v1/models"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            assert (await r.json())["data"][0]["id"] == "fake"
