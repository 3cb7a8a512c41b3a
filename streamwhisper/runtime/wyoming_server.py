"""The Wyoming protocol (Home Assistant's speech-to-text) on its own TCP port.

Each TCP connection is a :class:`WyomingPeer`. It answers ``describe`` (``info``) and ``ping``
(``pong``) itself and runs each request (``transcribe``, ``audio-start``, ``audio-chunk`` ...,
``audio-stop``) as one daemon :class:`~streamwhisper.runtime.session.Session` with a
:class:`~streamwhisper.runtime.dialects.wyoming.WyomingDialect`, through
:class:`RequestConnection`. So a request is admitted, limited, measured and drained on shutdown
as every WebSocket session is. Requests on one connection run one after another.

A request's answer is final. When the speaker stopped before ``audio-stop`` (the dialect sent
``transcript`` at an endpoint), the session ends at once, and the connection drops the request's
remaining ``audio-chunk`` (and ``audio-start``) events until its ``audio-stop``; a
``transcribe`` after the answer starts the next request at once. The same holds after a request that was
refused or ended by bad input: the client got an ``error``, and the rest of that request's audio
is dropped.

Events are written with the ``wyoming`` package (``async_write_event``). They are read by
:func:`read_event`, Wyoming's framing with limits, because the package's reader allocates
whatever lengths a client claims and reports a malformed event as the end of the stream: a
header line is at most ``MAX_LINE`` bytes, a data section ``MAX_DATA`` and a payload the
server's ``max_message_bytes``. A header that breaks these rules gets an ``error`` and the
connection is closed, since the stream cannot be followed past it; a request under way still
gets the transcript of the audio it sent. ``audio-chunk`` before ``audio-start``, audio of
another width or a bad ``transcribe`` get an ``error`` and the connection goes on. An event of a
type this server does not know is dropped (the Wyoming convention, so that newer clients work).
A connection that sends no event for ``idle_timeout_s`` gets an ``error`` and is closed.

When the server ends a connection it lingers: it sends FIN, discards what the client still sends
and closes when the client does (``LINGER_S`` at most), because closing a socket with unread
data makes the kernel reset the connection, and the client would lose the ``error`` before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from wyoming.error import Error as ErrorEvent
from wyoming.event import Event, async_write_event
from wyoming.ping import Pong

from streamwhisper.errors import ProtocolError

from . import wire
from .config import ServerConfig
from .connection import ConnectionClosed
from .dialects import Dialect
from .dialects.wyoming import (
    Request,
    WyomingDialect,
    audio_format,
    decode_events,
    info_event,
    parse_transcribe,
    problem,
    request_settings,
)
from .metrics import Metrics

logger = logging.getLogger(__name__)

MAX_LINE = 64 * 1024  # bytes of a header line
MAX_DATA = 64 * 1024  # bytes of a data section
LINGER_S = 10.0  # how long a closing connection waits for the client to close its side
# Requests that end this way close the connection too.
_CLOSE_AFTER = frozenset({"shutdown", "idle_timeout", "client_not_reading", "internal_error", "client_gone"})

Admit = Callable[[], ProtocolError | None]
RunSession = Callable[[Any, Dialect, wire.SessionSettings], Awaitable[None]]


class Unframed(ProtocolError):
    """A header the reader cannot follow: the rest of the stream cannot be read."""


def _length(header: Mapping[str, Any], name: str, limit: int) -> int:
    value = header.get(name) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Unframed(f"{name} must be a non-negative integer, got {value!r}", 1007, "invalid_frame")
    if value > limit:
        raise Unframed(f"{name} {value} is over the limit of {limit} bytes", 1009, "message_too_big")
    return value


async def read_event(reader: asyncio.StreamReader, max_payload: int) -> Event | None:
    """The next event, or None at the end of the stream; raises :class:`Unframed` for a header
    that breaks the framing or its limits, ProtocolError for a data section that is not a JSON
    object (the stream goes on after it)."""
    try:
        line = await reader.readline()
    except ValueError:  # no newline within the reader's limit
        raise Unframed(f"a header line is over the limit of {MAX_LINE} bytes", 1009, "message_too_big") from None
    except ConnectionError:  # reset by the client
        return None
    if not line.endswith(b"\n"):
        return None  # closed, perhaps within a line
    try:
        header = wire.loads(line)
    except (ValueError, RecursionError):
        raise Unframed("a header line is not JSON", 1007, "invalid_frame") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise Unframed('a header must be a JSON object with a string "type"', 1007, "invalid_frame")
    data_length = _length(header, "data_length", MAX_DATA)
    payload_length = _length(header, "payload_length", max_payload)
    inline = header.get("data")
    if inline is not None and not isinstance(inline, dict):
        raise Unframed('a header\'s "data" must be a JSON object', 1007, "invalid_frame")
    try:
        section = await reader.readexactly(data_length) if data_length else b""
        payload = await reader.readexactly(payload_length) if payload_length else None
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    data = dict(inline or {})
    if section:
        try:
            extra = wire.loads(section)
        except (ValueError, RecursionError):
            extra = None
        if not isinstance(extra, dict):
            raise ProtocolError(f"the data of {header['type'][:40]!r} is not a JSON object", 1007, "invalid_json")
        data.update(extra)
    return Event(type=header["type"], data=data, payload=payload)


class RequestConnection:
    """One request's events as a session's :class:`~streamwhisper.runtime.connection.Connection`:
    ``audio-chunk`` payloads are its binary messages; every other event is a JSON text for
    :meth:`WyomingDialect.parse`. ``describe`` and ``ping`` are answered on the way."""

    path = "wyoming"

    def __init__(self, peer: WyomingPeer, audio: tuple[int, int, int]) -> None:
        self.query: Mapping[str, str] = {}
        self.headers: Mapping[str, str] = {}
        self._peer, self._audio = peer, audio
        self.answered = asyncio.Event()  # the dialect sent the transcript: end the session
        self.stopped = False  # the request's audio-stop was read
        self.reason = ""  # why the session ended

    async def receive(self) -> str | bytes:
        while not self.answered.is_set():
            try:
                event = await self._peer.next_event(self.answered)
            except ProtocolError as exc:
                return problem(exc)
            if event is None:
                raise ConnectionClosed("the client closed the connection")
            if isinstance(event, asyncio.Event):
                break
            if event.type == "audio-chunk":
                try:
                    audio = audio_format(event.data)
                except ProtocolError as exc:
                    return problem(exc)
                if audio != self._audio:
                    text = f"audio-chunk of (rate, width, channels) {audio} after audio-start {self._audio}"
                    return problem(ProtocolError(text, 1007, "invalid_audio"))
                if event.payload:
                    return event.payload
            elif event.type in ("describe", "ping"):
                await self._peer.answer(event)
            else:
                self.stopped = event.type == "audio-stop"
                return wire.dumps({"type": event.type})
        return wire.dumps({"type": "audio-stop"})  # the answer is sent: end the session

    async def send(self, text: str) -> None:
        await self._peer.write(decode_events(text))

    async def close(self, code: int, reason: str) -> None:
        self.reason = reason


class WyomingPeer:
    """One Wyoming TCP connection: its events, one request at a time."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        server: WyomingServer,
    ) -> None:
        self._reader, self._writer, self._server = reader, writer, server
        self._read: asyncio.Task[Event | None] | None = None  # the read under way, never cut short
        self._request: Request | None = None  # the last transcribe's
        self._skip = False  # drop audio-start and audio-chunk until audio-stop
        self._unframed = False

    async def next_event(self, *wakes: asyncio.Event) -> Event | None | asyncio.Event:
        """The next event (None at the end of the stream), or the first of ``wakes`` set before
        it came; raises what :func:`read_event` raises. A read is never cancelled midway, so a
        wake (or a cancelled caller) leaves the stream where it was."""
        if self._unframed:
            return None
        if self._read is None:
            self._read = asyncio.create_task(read_event(self._reader, self._server.config.max_message_bytes))
        waits: list[asyncio.Task[Any]] = [asyncio.create_task(wake.wait()) for wake in wakes]
        try:
            await asyncio.wait({self._read, *waits}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if not self._read.done():
            return next(wake for wake in wakes if wake.is_set())
        read, self._read = self._read, None
        try:
            return read.result()
        except Unframed:
            self._unframed = True
            raise

    async def write(self, events: list[Event]) -> None:
        try:
            for event in events:
                await async_write_event(event, self._writer)
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionClosed(str(exc)) from None

    async def answer(self, event: Event) -> None:
        """Answer ``describe`` or ``ping``."""
        if event.type == "describe":
            await self.write([self._server.info])
        else:
            await self.write([Pong(text=event.data.get("text")).event()])

    async def error(self, error: ProtocolError) -> None:
        self._server.metrics.errors.labels(error.kind).inc()
        await self.write([ErrorEvent(text=str(error), code=error.kind).event()])

    async def run(self) -> None:
        idle = self._server.config.idle_timeout_s or None
        shutdown = self._server.shutdown
        try:
            while not shutdown.is_set():
                try:
                    async with asyncio.timeout(idle):
                        event = await self.next_event(shutdown)
                except TimeoutError:
                    await self.error(ProtocolError(f"no event for {idle:g} s", wire.CLOSE_POLICY, "idle_timeout"))
                    return
                except ProtocolError as exc:
                    await self.error(exc)
                    if self._unframed:
                        return
                    continue
                if not isinstance(event, Event) or not await self._handle(event):
                    return
        except ConnectionClosed:
            pass
        finally:
            try:
                await self._linger()
            finally:
                self._writer.close()
                with contextlib.suppress(Exception):
                    await self._writer.wait_closed()

    async def _linger(self) -> None:
        """Half-close, then discard what the client still sends until it closes (or ``LINGER_S``)."""
        if self._read is not None:
            self._read.cancel()
            await asyncio.wait({self._read})
            if not self._read.cancelled():
                self._read.exception()  # a read that ended meanwhile: its event or error is of no use now
        if self._reader.at_eof() or self._writer.is_closing() or not self._writer.can_write_eof():
            return
        with contextlib.suppress(TimeoutError, OSError, RuntimeError):
            self._writer.write_eof()
            async with asyncio.timeout(LINGER_S):
                while await self._reader.read(MAX_LINE):
                    pass

    async def _handle(self, event: Event) -> bool:
        """Handle an event between requests; False closes the connection."""
        kind = event.type
        if kind in ("describe", "ping"):
            await self.answer(event)
        elif kind == "transcribe":
            self._skip = False
            try:
                self._request = parse_transcribe(event.data)
            except ProtocolError as exc:
                self._skip = True
                await self.error(exc)
        elif self._skip and kind in ("audio-start", "audio-chunk", "audio-stop"):
            self._skip = kind != "audio-stop"
        elif kind == "audio-start":
            return await self._run_request(event)
        elif kind in ("audio-chunk", "audio-stop"):
            self._skip = kind == "audio-chunk"
            await self.error(ProtocolError(f"{kind} before audio-start", wire.CLOSE_INVALID, "out_of_order"))
        else:  # a newer client's event (select-program, ...): dropped, as Wyoming servers do
            self._server.metrics.errors.labels("unknown_message").inc()
            logger.debug("wyoming: ignored an event of type %.40r", kind)
        return True

    async def _run_request(self, start: Event) -> bool:
        server = self._server
        request, self._request = self._request, None
        self._skip = True  # until the request's audio-stop is read
        try:
            settings = request_settings(request, start.data, server.languages)
        except ProtocolError as exc:
            await self.error(exc)
            return True
        refusal = server.admit()
        if refusal is not None:
            server.metrics.refused.labels(refusal.kind).inc()
            await self.write([ErrorEvent(text=str(refusal), code=refusal.kind).event()])
            return True
        connection = RequestConnection(self, (settings.sample_rate, 2, settings.channels))
        await server.run_session(connection, WyomingDialect(on_answer=connection.answered.set), settings)
        self._skip = not connection.stopped
        return not self._unframed and connection.reason not in _CLOSE_AFTER


class WyomingServer:
    """The Wyoming listener: a :class:`WyomingPeer` per connection, each request a session
    admitted by ``admit`` and run by ``run_session`` (the daemon's)."""

    def __init__(
        self,
        config: ServerConfig,
        model: str,
        languages: list[str],
        metrics: Metrics,
        shutdown: asyncio.Event,
        admit: Admit,
        run_session: RunSession,
    ) -> None:
        self.config, self.languages, self.metrics, self.shutdown = config, languages, metrics, shutdown
        self.admit, self.run_session = admit, run_session
        self.info = info_event(model, languages)
        self.tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        cfg = self.config
        port = max(cfg.wyoming_port, 0)  # -1: any free port
        self._server = await asyncio.start_server(self._connected, cfg.wyoming_host or cfg.host, port, limit=MAX_LINE)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await WyomingPeer(reader, writer, self).run()
        except asyncio.CancelledError:  # close(): asyncio's stream callback would log it as an error
            pass
        except Exception:
            logger.exception("wyoming connection failed")
        finally:
            self.tasks.discard(task)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Close the connections still open (after the daemon waited for them)."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=5)
