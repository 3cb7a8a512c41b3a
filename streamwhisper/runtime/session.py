"""One task per stream: client messages -> Pump (Streamer, worker) -> events -> client.

A session reads the socket (bounded by the message size limit and TCP backpressure), feeds its
:class:`~streamwhisper.runtime.pump.Pump` (the pure :class:`Streamer` and the shared inference
worker), and queues the resulting messages in a bounded :class:`Outbox` that a writer task drains. However it ends (end
of stream, finalize, bad input, shutdown, limits) the audio it already received becomes finals
that are sent before the close, unless the client itself is gone.

A session of a resumable dialect (:mod:`.resume`) outlives a lost connection: it keeps
recognising, keeps its finals for replay, and takes the connection its client resumes with.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamwhisper.errors import ProtocolError
from streamwhisper.streaming.config import StreamingConfig

from . import wire
from .config import ServerConfig
from .connection import Connection, ConnectionClosed
from .dialects import Dialect, SessionInfo, Texts
from .metrics import Metrics
from .outbox import Outbox
from .resume import ReplayBuffer, ResumableDialect, Resumes
from .session_stream import SessionStream
from .shutdown import Shutdown
from .worker import InferenceWorker

logger = logging.getLogger(__name__)


def _resume_failed(why: str) -> ProtocolError:
    return ProtocolError(f"cannot resume: {why}; start a new session", wire.CLOSE_POLICY, "resume_failed")


@dataclass
class ServerContext:
    """What every session shares: settings, the worker, metrics, the shutdown signal, the clock."""

    server: ServerConfig
    streaming: StreamingConfig
    worker: InferenceWorker
    metrics: Metrics
    model_name: str
    shutdown: Shutdown
    sessions: set[Session] = dataclasses.field(default_factory=set)
    resumes: Resumes = dataclasses.field(default_factory=Resumes)  # sessions a client may resume
    # seconds for lags and latencies: the event loop's clock, which the limits' timers run on
    clock: Callable[[], float] = time.monotonic

    def mean_lag(self) -> float:
        lags = [s.lag for s in self.sessions]
        return sum(lags) / len(lags) if lags else 0.0


class _Ended(Exception):
    """The read loop ended the session: ``reason``, close ``code``, and whether to report it;
    ``lost`` when the connection was lost rather than closed (the session may be resumed)."""

    def __init__(self, reason: str, code: int, error: ProtocolError | None = None, lost: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.code, self.error, self.lost = reason, code, error, lost


# How a connection ended: (reason, close code, error to report, whether it was lost), or None
# when a resume took it over.
_Outcome = tuple[str, int, ProtocolError | None, bool]


class Session:
    def __init__(
        self,
        ws: Connection,
        ctx: ServerContext,
        session_id: str,
        settings: wire.SessionSettings,
        dialect: Dialect,
        resumable: ResumableDialect | None = None,
    ) -> None:
        self.ws, self.ctx, self.dialect = ws, ctx, dialect
        server = ctx.server
        self.info = SessionInfo(
            session_id,
            ctx.model_name,
            settings,
            {
                "max_message_bytes": server.max_message_bytes,
                "max_session_s": server.max_session_s,
                "idle_timeout_s": server.idle_timeout_s,
            },
        )
        self.outbox = Outbox(server.max_outbox)
        self._resumable = resumable if server.resume_grace_s > 0 else None
        self._replay = ReplayBuffer(server.max_replay)
        keep = self._replay.add if self._resumable is not None else None
        self.stream = SessionStream(ctx, self.info, dialect, self._send, keep)
        self._gone = False  # no client connected: nothing to deliver (but finals to keep)
        # resume: a connection waiting to take over
        self._next: tuple[Connection, int, asyncio.Future[None]] | None = None
        self._resume_wanted = asyncio.Event()
        self._released: asyncio.Future[None] | None = None  # the current connection's handler waits on it
        self._closing: set[asyncio.Task[None]] = set()  # connections being closed
        self._ws_released = False  # the current connection is closed, or being closed
        self._ending = False  # past the point where a resume can be taken

    @property
    def resume_token(self) -> str:
        return self.info.resume_token

    @property
    def connected(self) -> bool:
        """Whether a client connection is attached (False while a lost one may be resumed)."""
        return not self._gone

    @property
    def lag(self) -> float:
        """Seconds the transcript lags the audio (see :meth:`Pacing.lag`)."""
        return self.stream.lag

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        self.stream.configure(self.info.settings)
        if self._resumable is not None:
            self.info.resume_token = self.ctx.resumes.add(self)
            self.info.resume_grace_s = self.ctx.server.resume_grace_s
        self._send(self.dialect.ready(self.info))
        # a shutdown, or recognition failing on this session's audio (the pump gave up)
        ends: set[asyncio.Future[Any]] = {asyncio.create_task(self.ctx.shutdown.wait()), self.stream.failure}
        limit = self.ctx.server.max_session_s
        if limit:
            ends.add(asyncio.create_task(asyncio.sleep(limit)))
        try:
            while True:
                outcome = await self._serve(ends)
                if outcome is not None and not (outcome[3] and self._resumable is not None):
                    self._ending = True
                    await self._end(*outcome[:3])
                    return
                if outcome is not None:  # lost: wait for the client to come back
                    self._release(outcome[1], outcome[0])
                    if not await self._wait_for_resume(ends):
                        return
                if not self._take_over():
                    return
        finally:
            self._ending = True
            for task in ends:
                task.cancel()
            self.stream.close()
            self.ctx.resumes.discard(self.info.resume_token)
            if self._next is not None:
                self._next[2].set_exception(_resume_failed("the session has ended"))
            self._release(wire.CLOSE_GOING_AWAY, "ended")
            await asyncio.gather(*self._closing)  # the original connection's handler returns after its close

    async def _serve(self, ends: set[asyncio.Future[Any]]) -> _Outcome | None:
        """Serve the current connection until it ends: how it ended, or None when a resume
        takes the session over."""
        self._writer = asyncio.create_task(self._write_loop(), name=f"{self.info.id}-writer")
        reader = asyncio.create_task(self._read_loop(), name=f"{self.info.id}-reader")
        overflow = asyncio.create_task(self.outbox.overflowed.wait())
        resume = asyncio.create_task(self._resume_wanted.wait())
        try:
            await asyncio.wait(ends | {reader, overflow, resume}, return_when=asyncio.FIRST_COMPLETED)
            outcome = None if resume.done() else self._outcome(reader, overflow)
        finally:
            for task in (reader, overflow, resume):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        if outcome is None or outcome[3]:
            self._gone = True
            self._writer.cancel()
            if outcome is None:
                self._release(wire.CLOSE_POLICY, "resumed_elsewhere")
        return outcome

    def _outcome(self, reader: asyncio.Task[None], overflow: asyncio.Task[Any]) -> _Outcome:
        if self.stream.failure.done():
            return (*_internal_error(self.stream.failure.result()), False)
        if reader.done() and not reader.cancelled():
            exc = reader.exception()
            if isinstance(exc, _Ended):
                return exc.reason, exc.code, exc.error, exc.lost
            if exc is not None:
                logger.error("session %s failed", self.info.id, exc_info=exc)
                return (*_internal_error(exc), False)
            return "eof", wire.CLOSE_NORMAL, None, False
        if overflow.done():
            self.ctx.metrics.errors.labels("client_not_reading").inc()
            self._gone = True
            error = ProtocolError("the client does not read its messages", wire.CLOSE_POLICY, "client_not_reading")
            return "client_not_reading", wire.CLOSE_POLICY, error, True
        if self.ctx.shutdown.is_set():
            return "shutdown", wire.CLOSE_GOING_AWAY, None, False
        error = ProtocolError("session duration limit reached", wire.CLOSE_POLICY, "session_too_long")
        return "session_too_long", wire.CLOSE_POLICY, error, False

    async def _end(self, reason: str, code: int, error: ProtocolError | None) -> None:
        """End the session on its connection: its error, its last finals and ``closed``, the close."""
        if error is not None and reason != "client_not_reading":  # counted when it happened
            self.ctx.metrics.errors.labels(error.kind).inc()
        if error is not None:
            self._send(self.dialect.error(error.kind, str(error)))
        if not self._gone:
            await self.stream.drain()
            if error is None and self.stream.failure.done():  # recognition failed on its last requests
                reason, code, error = _internal_error(self.stream.failure.result())
                self.ctx.metrics.errors.labels(error.kind).inc()
                self._send(self.dialect.error(error.kind, str(error)))
            self._send(self.dialect.closed(self.info, reason))
            await self._flush_outbox(self._writer)
        self._writer.cancel()
        self._release(code, reason[:120])

    def _release(self, code: int, reason: str) -> None:
        """Close the current connection, if open, and then let its handler return (in the
        background: a client that stopped reading holds a close up to its timeout)."""
        if self._ws_released:
            return
        self._ws_released = True
        ws, released, self._released = self.ws, self._released, None

        async def close() -> None:
            await ws.close(code, reason)
            if released is not None and not released.done():
                released.set_result(None)

        task = asyncio.create_task(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _wait_for_resume(self, ends: set[asyncio.Future[Any]]) -> bool:
        """Wait for the client to resume, at most ``resume_grace_s``; False when the session is
        to end instead (grace period over, shutdown, duration limit)."""
        grace = asyncio.create_task(asyncio.sleep(self.ctx.server.resume_grace_s))
        resume = asyncio.create_task(self._resume_wanted.wait())
        try:
            await asyncio.wait(ends | {grace, resume}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            grace.cancel()
            resume.cancel()
        if self._resume_wanted.is_set():
            return True
        self._ending = True
        if grace.done():
            self.ctx.metrics.resumes.labels("expired").inc()
            logger.info("session %s: its client did not resume within the grace period; ended", self.info.id)
        return False

    def resume(self, ws: Connection, last_seq: int) -> asyncio.Future[None]:
        """Hand the session the connection its client resumed with, to take over from the current
        one (lost, or still believed alive); the future is done once the session lets it go.
        Raises ProtocolError (``resume_failed``) when a final after ``last_seq`` is gone."""
        assert self._resumable is not None
        if self._ending:
            raise _resume_failed("the session has ended")
        if self._replay.since(last_seq) is None:
            raise _resume_failed(f"finals after seq {last_seq} are no longer kept")
        released = asyncio.get_running_loop().create_future()
        if self._next is not None:  # an earlier resume, not taken yet: this one replaces it
            old_released = self._next[2]
            old_released.set_exception(ProtocolError("resumed again", wire.CLOSE_POLICY, "resumed_elsewhere"))
        self._next = (ws, last_seq, released)
        self._resume_wanted.set()
        return released

    def _take_over(self) -> bool:
        """Switch to the resumed connection: ``resumed``, the finals its client missed, then on.
        False when a final it needs was dropped meanwhile: the session ends, and the client is
        refused as :meth:`resume` would have (its handler sends the error)."""
        assert self._next is not None and self._resumable is not None
        self.ws, last_seq, self._released = self._next
        self._ws_released = False
        self._next = None
        self._resume_wanted.clear()
        replay = self._replay.since(last_seq)
        if replay is None:
            assert self._released is not None
            self._released.set_exception(_resume_failed(f"finals after seq {last_seq} are no longer kept"))
            self._released, self._ws_released = None, True  # its handler answers and closes it
            return False
        self.outbox = Outbox(self.ctx.server.max_outbox)
        self._gone = False
        self._send(self._resumable.resumed(self.info, self.stream.frames))
        for text in replay:
            self.outbox.put(text)
        self.ctx.metrics.resumes.labels("resumed").inc()
        logger.info("session %s resumed after seq %d (%d finals replayed)", self.info.id, last_seq, len(replay))
        return True

    async def _read_loop(self) -> None:
        idle = self.ctx.server.idle_timeout_s or None
        while True:
            try:
                async with asyncio.timeout(idle):
                    message = await self.ws.receive()
            except TimeoutError:
                raise _Ended(
                    "idle_timeout",
                    wire.CLOSE_POLICY,
                    ProtocolError(f"no message for {idle:g} s", wire.CLOSE_POLICY, "idle_timeout"),
                ) from None
            except ConnectionClosed as exc:
                self._gone = True
                raise _Ended("client_gone", wire.CLOSE_NORMAL, lost=not exc.clean) from None
            except ProtocolError as exc:  # the connection refused a message unread (over max_message_bytes)
                raise _Ended(exc.kind, exc.code, exc) from None
            try:
                if isinstance(message, bytes):
                    self.stream.on_audio(message)
                elif self._on_text(message):
                    return
                self.stream.take_marks()
            except ProtocolError as exc:
                raise _Ended(exc.kind, exc.code, exc) from None

    def _on_text(self, text: str) -> bool:
        """Handle a control message (or the several it stands for); True at end of stream."""
        parsed = self.dialect.parse(text)
        eof = False
        for message in parsed if isinstance(parsed, tuple) else (parsed,):
            eof = self._on_message(message) or eof
        return eof

    def _on_message(self, message: wire.ClientMessage) -> bool:
        if isinstance(message, wire.Audio):
            self.stream.on_audio(message.data)
        elif isinstance(message, wire.Reply):
            if message.error is not None:
                self.ctx.metrics.errors.labels(message.error).inc()
            self._send(message.texts)
        elif isinstance(message, wire.ConfigMessage):
            if self.stream.audio_started:
                raise ProtocolError("a config message must come before any audio", wire.CLOSE_INVALID, "out_of_order")
            settings = wire.apply_settings(self.info.settings, message.settings)
            self.stream.configure(settings)
            self._send(self.dialect.ready(self.info))
        elif isinstance(message, wire.Ack):
            self._replay.ack(message.seq)
        elif isinstance(message, wire.Finalize):
            self.stream.finalize()
        elif isinstance(message, wire.Eof):
            return True
        elif isinstance(message, wire.Unknown):
            self.ctx.metrics.errors.labels("unknown_message").inc()
            self._send(self.dialect.error("unknown_message", f"unknown message type {message.type!r}; ignored"))
        return False

    def _send(self, texts: Texts, replaceable: bool = False) -> None:
        if texts is None or self._gone:
            return
        for text in (texts,) if isinstance(texts, str) else texts:
            self.outbox.put(text, replaceable)

    async def _write_loop(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            while (text := await self.outbox.get()) is not None:
                await self.ws.send(text)

    async def _flush_outbox(self, writer: asyncio.Task[None]) -> None:
        """Let the writer send what is queued (the last message is ``closed``), then stop it."""
        self.outbox.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(writer), self.ctx.shutdown.sending_left())


def _internal_error(exc: BaseException) -> tuple[str, int, ProtocolError]:
    error = ProtocolError(f"internal error: {type(exc).__name__}", wire.CLOSE_INTERNAL, "internal_error")
    return "internal_error", wire.CLOSE_INTERNAL, error
