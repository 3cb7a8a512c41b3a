"""An asyncio client for the native protocol (docs/protocol.md), yielding typed messages.

::

    from streamwhisper.events import Final

    async with StreamClient.connect("ws://127.0.0.1:8765", sample_rate=16000) as client:
        await client.send_audio(samples)          # float32 samples or raw PCM bytes
        await client.eof()                        # no more audio: the server finalises
        async for message in client:              # Partial, Final, ..., Closed
            if isinstance(message, Final):
                print(message.text)

Messages are the events of :mod:`streamwhisper.events` (``Partial``, ``Final``,
``SpeechStarted``, ``SpeechEnded``, ``Error``) and :class:`Ready`, :class:`Status`,
:class:`Closed`; a message type this client does not know (a newer server) arrives as
:class:`Unknown`. Both directions are encoded by :mod:`streamwhisper.runtime.dialects.native`.
:func:`stream_file` streams a file at real time (or faster) and returns every message.

A lost connection is repaired by the client itself (``resume=True``, the default): it reconnects
with the session's resume token, gets the finals it missed, and sends on from the last sample the
server holds. When the session cannot be resumed (the server restarted, the grace period passed)
or the server shut down (``closed`` with reason ``shutdown``, 1001), it opens a new session and
sends again the audio after the last final (or after ``closed.audio_seconds``); the messages it
yields then go on as one stream: times and ``seq`` continue from where they were. The audio it may
have to send again is bounded (``max_buffer_s``, :mod:`streamwhisper.audio_backlog`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from .audio.convert import PCM_ENCODINGS, float32_to_pcm
from .audio_backlog import AudioBacklog
from .client_link import Link, Reconnect, moved, query_value, refusal
from .errors import ProtocolError
from .events import Error, Final, Partial, SpeechEnded, SpeechStarted
from .runtime.dialects.native import (
    LAST_SEQ_PARAM,
    RESUME_PARAM,
    STREAM_PATH,
    Closed,
    Ready,
    Resumed,
    ServerMessage,
    Status,
    decode_server_message,
    encode_client_message,
)
from .runtime.wire import Ack, ClientMessage, ConfigMessage, Eof, Finalize, KeepAlive, Unknown

__all__ = ["Closed", "ConfigMessage", "Ready", "Reconnect", "ServerMessage", "Status", "StreamClient", "Unknown"]

logger = logging.getLogger(__name__)

# errors after which the server goes on with the session; any other ends it (closed follows)
_GOES_ON = frozenset({"unknown_message", "recognition_failed"})


class _Refused(ConnectionError):
    """A reconnection the server refused for now (shutting down, full): tried again."""


_NOT_CONNECTED = (OSError, InvalidHandshake, ConnectionClosed, TimeoutError, _Refused)


class StreamClient:
    """One streaming session. Use :meth:`connect` (an async context manager)."""

    def __init__(self, link: Link, resume: bool, max_buffer_s: float, reconnect_s: float) -> None:
        self._link = link
        self._resume, self._max_buffer_s, self._reconnect_s = resume, max_buffer_s, reconnect_s
        self._ws: ClientConnection | None = None
        self._generation = 0  # numbers connections: a failure seen on an old one is repaired already
        self._repairing = asyncio.Lock()
        self.ready: Ready | None = None  # the latest ``ready``: the session's effective settings
        self.reconnects: list[Reconnect] = []
        self._backlog: AudioBacklog | None = None
        self._encoding = link.encoding
        self._token = ""
        self._last_seq = -1  # the last final's seq in the current server session
        self._session_frame = 0  # where the current server session's audio begins (frames of the stream)
        self._seq_base = 0  # added to the seq of the current session's messages
        self._last_yielded_seq = -1
        self._counts = [0, 0, 0, 0]  # words and finals of the sessions before the current one, and of it
        self._restart_at = 0  # a new session sends the audio from here (frames of the stream) on
        self._eof = False
        self._ended = False  # the server ends the session on purpose: no repair

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        resume: bool = True,
        max_buffer_s: float = 120.0,
        reconnect_s: float = 60.0,
        **settings: Any,
    ) -> _Connecting:
        """Connect to ``url`` (``ws://host:port``; the path defaults to /v1/stream).

        ``settings`` are session settings (sample_rate, encoding, channels, language, task,
        interim_results, word_timestamps, endpointing_ms, label), sent as query parameters.
        ``resume``: repair lost connections (see the module's docstring), trying for at most
        ``reconnect_s`` seconds each time and holding at most ``max_buffer_s`` seconds of audio
        to send again. Entering the context raises ConnectionError when the server refuses the
        session.
        """
        parts = urlsplit(url)
        path = parts.path if parts.path not in ("", "/") else STREAM_PATH
        query = {k: query_value(v) for k, v in settings.items() if v is not None}
        headers = {"Authorization": f"Bearer {token}"} if token else None
        base = f"{parts.scheme}://{parts.netloc}{path}"
        link = Link(base, query, headers, settings.get("encoding", "pcm_s16le"))
        return _Connecting(cls, link, resume, max_buffer_s, reconnect_s)

    async def _open(self) -> Ready:
        """The first connection: its ``ready`` (ConnectionError when the session is refused)."""
        ws, first = await self._link.open()
        if not isinstance(first, Ready):
            await ws.close()
            raise ConnectionError(f"session refused ({ws.close_code}): {refusal(first)}")
        self._use(ws)
        self._ready(first)
        return first

    def _use(self, ws: ClientConnection) -> None:
        self._ws, self._generation = ws, self._generation + 1

    def _ready(self, ready: Ready) -> None:
        self.ready, self._token = ready, ready.resume_token if self._resume else ""
        config = ready.config
        if self._backlog is None:
            frame_bytes = PCM_ENCODINGS[config.encoding].itemsize * config.channels
            self._backlog = AudioBacklog(frame_bytes, config.sample_rate, self._max_buffer_s)

    @property
    def audio_dropped_s(self) -> float:
        """Seconds of audio dropped because more than ``max_buffer_s`` waited to be sent again."""
        return self._backlog.dropped_s if self._backlog is not None else 0.0

    async def send_audio(self, audio: np.ndarray | bytes) -> None:
        """Send samples (float32 in [-1, 1], encoded as the session's encoding) or raw bytes."""
        if isinstance(audio, (bytes, bytearray, memoryview)):
            data = bytes(audio)
        else:
            data = float32_to_pcm(audio, self._encoding)
        if self._resume and self._backlog is not None:
            self._backlog.append(data)
        await self._send(data, resent=self._resume)

    async def send(self, message: ClientMessage) -> None:
        """Send a control message; a :class:`ConfigMessage` (before any audio) also sets the
        encoding :meth:`send_audio` uses."""
        if isinstance(message, ConfigMessage):
            self._encoding = message.settings.get("encoding", self._encoding)
            self._link.query |= {k: query_value(v) for k, v in message.settings.items() if v is not None}
            self._backlog = None  # sized from the next ready's settings
        if isinstance(message, Eof):
            self._eof = True
        await self._send(encode_client_message(message), resent=self._resume and isinstance(message, Eof))

    async def _send(self, data: str | bytes, resent: bool) -> None:
        """Send on the current connection; when it is lost, repair it (``resent``: the repair
        sends ``data`` again, from the backlog or as the eof it resends)."""
        generation, ws = self._generation, self._ws
        assert ws is not None
        try:
            await ws.send(data)
        except ConnectionClosed as exc:
            if not self._resume or self._ended or (exc.rcvd is not None and exc.rcvd.code != 1001):
                if resent:
                    return  # the server ended the session: recv() reads why
                raise
            await self._repair(generation)
            if not resent:
                await self._send(data, resent)

    async def finalize(self) -> None:
        await self.send(Finalize())

    async def keepalive(self) -> None:
        await self.send(KeepAlive())

    async def eof(self) -> None:
        await self.send(Eof())

    async def recv(self) -> ServerMessage | Unknown | None:
        """The next server message, or None once the server closed the session.

        Raises ProtocolError when the server sends something that is not a message, and
        ConnectionError when a lost connection could not be repaired.
        """
        while True:
            generation, ws = self._generation, self._ws
            assert ws is not None
            try:
                frame = await ws.recv()
            except ConnectionClosed as exc:
                # lost (no close frame), or 1001 from a server shutting down: repaired; any
                # other close ends the session (the server sent why)
                if not self._resume or self._ended or (exc.rcvd is not None and exc.rcvd.code != 1001):
                    return None
                await self._repair(generation)
                continue
            if not isinstance(frame, str):
                raise ProtocolError("the server sent a binary frame")
            message = await self._take(decode_server_message(frame), generation)
            if message is not None:
                return message

    async def _take(self, message: ServerMessage | Unknown, generation: int) -> ServerMessage | Unknown | None:
        """Bookkeeping for one message from the server; the message as the caller sees it
        (times and seq of a later session moved on), or None for one the client handles."""
        offset = self._session_frame / self._backlog.sample_rate if self._backlog is not None else 0.0
        match message:
            case Ready():
                self._ready(message)  # after a config message
            case Final(seq=seq, end=end):
                self._last_seq = seq
                self._counts[2:] = [self._counts[2] + len(message.words), self._counts[3] + 1]
                if self._backlog is not None:
                    self._backlog.release(self._session_frame + round(end * self._backlog.sample_rate))
                if self._token:
                    with contextlib.suppress(ConnectionClosed):  # a lost connection shows in recv()
                        await self._ws.send(encode_client_message(Ack(seq)))  # type: ignore[union-attr]
            case Error(code=code) if code not in _GOES_ON:
                self._ended = True
            case Closed(reason="shutdown") if self._resume and self._has_more(message):
                self._token = ""  # the session is over: a new one goes on after what it received
                self._restart_at = self._session_frame + round(message.audio_seconds * self._link_rate())
                await self._repair(generation)
                return None
            case Closed():
                self._ended = True
                words, finals = self._counts[:2]
                return dataclasses.replace(
                    message, audio_seconds=message.audio_seconds + offset, words=message.words + words,
                    finals=message.finals + finals,
                )  # fmt: skip
        if isinstance(message, (Partial, Final)):
            self._last_yielded_seq = message.seq + self._seq_base
            if self._session_frame:
                return moved(message, offset, self._seq_base)
        elif isinstance(message, (SpeechStarted, SpeechEnded)) and self._session_frame:
            return dataclasses.replace(message, time=message.time + offset)
        return message

    def _link_rate(self) -> int:
        return self._backlog.sample_rate if self._backlog is not None else 16000

    def _has_more(self, closed: Closed) -> bool:
        """Whether audio remains to be recognised after a session ``closed`` (or may come)."""
        if not self._eof or self._backlog is None:
            return True
        return self._backlog.end > self._session_frame + round(closed.audio_seconds * self._backlog.sample_rate)

    # -- repair ------------------------------------------------------------------------------

    async def _repair(self, generation: int) -> None:
        """Replace the lost connection ``generation`` (once, however many saw it fail): resume the
        session, else start a new one (after the audio a shut-down session received, else after
        the last final) and send its audio again. Raises ConnectionError after ``reconnect_s``
        of failed attempts."""
        async with self._repairing:
            if generation != self._generation:
                return  # repaired already
            began = time.monotonic()
            delay = 0.0
            while True:
                try:
                    await self._reconnect()
                    return
                except _NOT_CONNECTED as exc:
                    if time.monotonic() - began > self._reconnect_s:
                        raise ConnectionError(f"cannot reach {self._link.base} again: {exc}") from None
                    await asyncio.sleep(delay)
                    delay = min(max(delay * 2, 0.25), 5.0)

    async def _reconnect(self) -> None:
        """One attempt: a connection is open and the audio sent again, or it raises."""
        assert self._backlog is not None
        rate = self._backlog.sample_rate
        if self._token:
            ws, first = await self._link.open({RESUME_PARAM: self._token, LAST_SEQ_PARAM: str(self._last_seq)})
            if isinstance(first, Resumed):
                self._use(ws)
                self.reconnects.append(Reconnect(time.monotonic(), True, self._session_frame / rate))
                await self._resend(self._session_frame + first.audio_frames)
                return
            await ws.close()
            if not (isinstance(first, Error) and first.code == "resume_failed"):
                raise _Refused(f"resume refused ({ws.close_code}): {refusal(first)}")
            logger.warning("session %s could not be resumed; starting a new one", self.ready and self.ready.session_id)
            self._token = ""
        ws, first = await self._link.open()
        if not isinstance(first, Ready):
            await ws.close()
            raise _Refused(f"session refused ({ws.close_code}): {refusal(first)}")
        words, finals, session_words, session_finals = self._counts
        self._counts = [words + session_words, finals + session_finals, 0, 0]
        self._session_frame = max(self._restart_at, self._backlog.start)
        self._seq_base = self._last_yielded_seq + 1
        self._last_seq = -1
        self._use(ws)
        self._ready(first)
        self.reconnects.append(Reconnect(time.monotonic(), False, self._session_frame / rate))
        await self._resend(self._session_frame)

    async def _resend(self, frame: int) -> None:
        """Send the audio from ``frame`` of the stream on the new connection (and the eof, if sent)."""
        assert self._ws is not None and self._backlog is not None
        data = self._backlog.since(frame)
        step = max(self._backlog.frame_bytes * self._backlog.sample_rate // 10, self._backlog.frame_bytes)
        for i in range(0, len(data), step):
            await self._ws.send(data[i : i + step])
        if self._eof:
            await self._ws.send(encode_client_message(Eof()))

    def __aiter__(self) -> AsyncIterator[ServerMessage | Unknown]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[ServerMessage | Unknown]:
        while (message := await self.recv()) is not None:
            yield message

    @property
    def close_code(self) -> int | None:
        return self._ws.close_code if self._ws is not None else None

    async def close(self) -> None:
        """Close the connection (a close frame: the server ends the session, no resume)."""
        self._ended = True
        if self._ws is not None:
            await self._ws.close()


class _Connecting:
    def __init__(self, cls: type[StreamClient], link: Link, resume: bool, max_buffer_s: float, reconnect_s: float):
        self._client = cls(link, resume, max_buffer_s, reconnect_s)

    async def __aenter__(self) -> StreamClient:
        await self._client._open()
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()


async def stream_file(
    url: str,
    audio: np.ndarray,
    *,
    speed: float = 1.0,
    chunk_s: float = 0.1,
    on_message: Callable[[ServerMessage | Unknown, float], None] | None = None,
    token: str | None = None,
    **settings: Any,
) -> list[ServerMessage | Unknown]:
    """Stream 16 kHz float32 ``audio`` at ``speed`` x real time, then eof; returns every message
    (the first is the :class:`Ready`, the last normally :class:`Closed`).

    ``on_message(message, sent_s)`` is called as each message arrives with the audio seconds
    sent so far (for latency measurements).
    """
    messages: list[ServerMessage | Unknown] = []
    sent = 0.0
    async with StreamClient.connect(url, token=token, sample_rate=16000, **settings) as client:
        assert client.ready is not None
        messages.append(client.ready)

        async def read() -> None:
            async for message in client:
                messages.append(message)
                if on_message is not None:
                    on_message(message, sent)

        reader = asyncio.create_task(read())
        step = max(int(chunk_s * 16000), 1)
        began = time.monotonic()
        for i in range(0, len(audio), step):
            await client.send_audio(audio[i : i + step])
            sent = min(i + step, len(audio)) / 16000
            if speed > 0:
                await asyncio.sleep(max(0.0, began + sent / speed - time.monotonic()))
        await client.eof()
        await reader
    return messages
