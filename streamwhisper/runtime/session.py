"""One task per stream: client messages -> Pump (Streamer, worker) -> events -> client.

A session reads the socket (bounded by the message size limit and TCP backpressure), feeds its
:class:`~streamwhisper.runtime.pump.Pump` (the pure :class:`Streamer` and the shared inference
worker), and queues the resulting messages in a bounded :class:`Outbox` that a writer task drains. However it ends (end
of stream, finalize, bad input, shutdown, limits) the audio it already received becomes finals
that are sent before the close, unless the client itself is gone.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamwhisper.audio.convert import StreamResampler, pcm_to_float32
from streamwhisper.audio.mel import SAMPLE_RATE
from streamwhisper.errors import AudioFormatError, ProtocolError, StreamWhisperError
from streamwhisper.events import Error, Event, Final, Partial
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.streaming.config import StreamingConfig
from streamwhisper.streaming.streamer import Streamer

from . import wire
from .config import ServerConfig
from .connection import Connection, ConnectionClosed
from .dialects import Dialect, SessionInfo, Texts
from .metrics import Metrics
from .outbox import Outbox
from .pump import Outcome, Pump
from .shutdown import Shutdown
from .worker import InferenceWorker

logger = logging.getLogger(__name__)


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
    # seconds for lags and latencies: the event loop's clock, which the limits' timers run on
    clock: Callable[[], float] = time.monotonic

    def mean_lag(self) -> float:
        lags = [s.lag for s in self.sessions]
        return sum(lags) / len(lags) if lags else 0.0


class _Ended(Exception):
    """The read loop ended the session: ``reason``, close ``code``, and whether to report it."""

    def __init__(self, reason: str, code: int, error: ProtocolError | None = None) -> None:
        super().__init__(reason)
        self.reason, self.code, self.error = reason, code, error


class Session:
    def __init__(
        self,
        ws: Connection,
        ctx: ServerContext,
        session_id: str,
        settings: wire.SessionSettings,
        dialect: Dialect,
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
        self._lag = 0.0  # transcript lag measured at the last result
        self._lag_at = 0.0  # when
        self._audio_started = False
        self._pump: Pump | None = None
        self._resampler: StreamResampler | None = None
        self._finished = asyncio.Event()
        self._failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self._gone = False  # the client disconnected: nothing more to deliver
        self._received = 0.0  # seconds of 16 kHz audio fed to the streamer
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=4096)  # (audio seconds, monotonic)
        self._last_status = 0.0

    @property
    def lag(self) -> float:
        """Seconds the transcript lags the audio: the last measured lag while requests keep coming
        (or longer, while one is stuck at the worker); 0 once the session went quiet."""
        now = self.ctx.clock()
        waiting = 0.0
        pump = self._pump
        if pump is not None and pump.inflight is not None:
            waiting = now - self._arrival(pump.inflight.end)
        elif pump is None or now - self._lag_at > 2 * pump.streamer.step_s + 1.0:
            return 0.0
        return max(self._lag, waiting)

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        self._configure(self.info.settings)
        self._send(self.dialect.ready(self.info))
        writer = asyncio.create_task(self._write_loop(), name=f"{self.info.id}-writer")
        reader = asyncio.create_task(self._read_loop(), name=f"{self.info.id}-reader")
        shutdown = asyncio.create_task(self.ctx.shutdown.wait())
        overflow = asyncio.create_task(self.outbox.overflowed.wait())
        waits: set[asyncio.Future[Any]] = {reader, shutdown, overflow, self._failure}
        limit = self.ctx.server.max_session_s
        if limit:
            waits.add(asyncio.create_task(asyncio.sleep(limit)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            reason, code, error = self._outcome(reader, shutdown, overflow)
            if reader is not None and not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
            if error is not None:
                self.ctx.metrics.errors.labels(error.kind).inc()
                self._send(self.dialect.error(error.kind, str(error)))
            if not self._gone:
                await self._drain()
                self._send(self.dialect.closed(self.info, reason))
                await self._flush_outbox(writer)
            await self.ws.close(code, reason[:120])
        finally:
            for task in waits | {writer}:
                task.cancel()
            if self._pump is not None:
                self._pump.close()

    def _outcome(
        self, reader: asyncio.Task[None], shutdown: asyncio.Task[Any], overflow: asyncio.Task[Any]
    ) -> tuple[str, int, ProtocolError | None]:
        if self._failure.done():  # recognition failed on this session's audio (the pump gave up)
            return _internal_error(self._failure.result())
        if reader.done() and not reader.cancelled():
            exc = reader.exception()
            if isinstance(exc, _Ended):
                return exc.reason, exc.code, exc.error
            if exc is not None:
                logger.error("session %s failed", self.info.id, exc_info=exc)
                return _internal_error(exc)
            return "eof", wire.CLOSE_NORMAL, None
        if overflow.done():
            self._gone = True
            error = ProtocolError("the client does not read its messages", wire.CLOSE_POLICY, "client_not_reading")
            return "client_not_reading", wire.CLOSE_POLICY, error
        if shutdown.done():
            return "shutdown", wire.CLOSE_GOING_AWAY, None
        error = ProtocolError("session duration limit reached", wire.CLOSE_POLICY, "session_too_long")
        return "session_too_long", wire.CLOSE_POLICY, error

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
            except ConnectionClosed:
                self._gone = True
                raise _Ended("client_gone", wire.CLOSE_NORMAL) from None
            except ProtocolError as exc:  # the connection refused a message unread (over max_message_bytes)
                raise _Ended(exc.kind, exc.code, exc) from None
            try:
                if isinstance(message, bytes):
                    self._on_audio(message)
                elif self._on_text(message):
                    return
                self._take_marks()
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
            self._on_audio(message.data)
        elif isinstance(message, wire.Reply):
            if message.error is not None:
                self.ctx.metrics.errors.labels(message.error).inc()
            self._send(message.texts)
        elif isinstance(message, wire.ConfigMessage):
            if self._audio_started:
                raise ProtocolError("a config message must come before any audio", wire.CLOSE_INVALID, "out_of_order")
            settings = wire.apply_settings(self.info.settings, message.settings)
            self._configure(settings)
            self._send(self.dialect.ready(self.info))
        elif isinstance(message, wire.Finalize):
            if self._pump is not None:
                self._pump.finalize()
        elif isinstance(message, wire.Eof):
            return True
        elif isinstance(message, wire.Unknown):
            self.ctx.metrics.errors.labels("unknown_message").inc()
            self._send(self.dialect.error("unknown_message", f"unknown message type {message.type!r}; ignored"))
        return False

    def _take_marks(self) -> None:
        """Hand the marks the dialect asked for (``SessionInfo.marks``) to the pump."""
        marks, self.info.marks = self.info.marks, []
        for then in marks:
            assert self._pump is not None
            self._pump.mark(functools.partial(self._send_answer, then))

    def _send_answer(self, then: Callable[[], Texts]) -> None:
        self._send(then())

    def _configure(self, settings: wire.SessionSettings) -> None:
        if settings.model is not None and settings.model != self.ctx.model_name:
            raise ProtocolError(
                f"model {settings.model!r} is not enabled on this server (enabled: {self.ctx.model_name})",
                wire.CLOSE_POLICY,
                "model_not_enabled",
            )
        self.info.settings = settings
        if self._pump is not None:
            self._pump.close()
        streamer = Streamer(self._streaming_config(settings), key=self.info.id)
        self._pump = Pump(streamer, self.ctx.worker, self._emit, self, self._finished.set, self._failure.set_result)
        self._resampler = StreamResampler(settings.sample_rate)

    def _streaming_config(self, settings: wire.SessionSettings) -> StreamingConfig:
        base = self.ctx.streaming
        vad, hold, pause_final = base.vad, base.pause_hold_ms, base.pause_final
        if settings.endpointing_ms is not None:
            ms = max(settings.endpointing_ms, vad.frame_ms)
            if ms < vad.endpoint_ms and hold:  # finals at shorter pauses; utterances as the server cuts them
                hold, pause_final = ms, True
            else:
                vad = dataclasses.replace(vad, endpoint_ms=ms)
        return dataclasses.replace(
            base, language=settings.language, task=settings.task, vad=vad, pause_hold_ms=hold, pause_final=pause_final
        )

    # -- audio and recognition -----------------------------------------------------------------

    def _on_audio(self, data: bytes) -> None:
        settings = self.info.settings
        try:
            samples = pcm_to_float32(data, settings.encoding, settings.channels)
        except AudioFormatError as exc:
            raise ProtocolError(str(exc), wire.CLOSE_INVALID, "invalid_audio") from None
        self._audio_started = True
        assert self._resampler is not None
        self._feed(self._resampler.process(samples))
        answer = self.dialect.audio(self.info)
        if answer is not None:
            self._send(*answer)

    def _feed(self, samples: Any) -> None:
        if not len(samples):
            return
        assert self._pump is not None
        seconds = len(samples) / SAMPLE_RATE
        self._received += seconds
        self.info.audio_seconds = self._received
        self.ctx.metrics.add_audio(seconds)
        self._arrivals.append((self._received, self.ctx.clock()))
        self._pump.feed(samples)

    # -- what the pump reports (PumpObserver) --------------------------------------------------

    def result(self, request: RecognitionRequest, outcome: Outcome) -> None:
        if isinstance(outcome, Hypothesis):
            self._adapt(self.ctx.clock() - self._arrival(request.end))
        elif outcome is not None:
            self.ctx.metrics.errors.labels("recognition_failed").inc()

    def refused(self, request: RecognitionRequest) -> None:
        self.ctx.metrics.errors.labels("worker_overloaded").inc()

    def _adapt(self, lag: float) -> None:
        """Longer steps (fewer requests, fewer partials) while the transcript lags the audio."""
        assert self._pump is not None
        streamer = self._pump.streamer
        self._lag, self._lag_at = lag, self.ctx.clock()
        server, streaming = self.ctx.server, self.ctx.streaming
        high = min(server.max_step_s, streaming.max_window_s - streaming.force_commit_s)
        step = streamer.step_s
        # Only a saturated worker is overload; a lag of a batch or two on an idle one is not,
        # and longer steps would only add latency there.
        if lag > server.degrade_lag_s and self.ctx.worker.stats.utilization() > 0.9:
            new = min(step * 1.5, high)
        elif lag < server.degrade_lag_s / 3:
            new = max(step / 1.5, streaming.min_step_s)
        else:
            new = step
        now = self.ctx.clock()
        if new != step or (lag > server.degrade_lag_s and now - self._last_status > 5.0):
            streamer.step_s = new
            self._last_status = now
            self._send(self.dialect.status(lag, new))

    def _arrival(self, audio_s: float) -> float:
        """When the audio up to ``audio_s`` had been received (monotonic seconds)."""
        arrivals = self._arrivals
        if not arrivals:
            return self.ctx.clock()
        i = bisect.bisect_left(arrivals, audio_s - 1e-6, key=lambda a: a[0])
        return arrivals[min(i, len(arrivals) - 1)][1]

    async def _drain(self) -> None:
        """Turn every sample received into finals: flush the pump and wait for its requests."""
        pump = self._pump
        if pump is None:
            return
        if self._resampler is not None:
            with contextlib.suppress(StreamWhisperError):
                self._feed(self._resampler.flush())
        pump.flush()
        self._take_marks()
        if not pump.finished and not self.ctx.shutdown.is_set():
            # the client ended its stream: it gets every word it sent, however busy the worker
            # is; a shutdown meanwhile puts the deadline below on what is left
            finished = asyncio.create_task(self._finished.wait())
            shutdown = asyncio.create_task(self.ctx.shutdown.wait())
            await asyncio.wait({finished, shutdown}, return_when=asyncio.FIRST_COMPLETED)
            for task in (finished, shutdown):
                task.cancel()
        if not pump.finished:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.ctx.shutdown.recognition_left()):
                    await self._finished.wait()
            pump.give_up()  # past the deadline: what was heard becomes the last finals

    # -- output ---------------------------------------------------------------------------------

    def _emit(self, events: list[Event]) -> None:
        now = self.ctx.clock()
        for event in events:
            if isinstance(event, Error):
                self._send(self.dialect.error(event.code, event.message))
                continue
            if isinstance(event, (Partial, Final)) and event.words:
                latency = max(now - self._arrival(event.end), 0.0)
                if isinstance(event, Final):
                    self.ctx.metrics.final_latency.observe(latency)
                    self.info.words += len(event.words)
                    self.info.finals += 1
                else:
                    self.ctx.metrics.partial_latency.observe(latency)
            self._send(self.dialect.event(event, self.info), replaceable=isinstance(event, Partial))
        self._take_marks()  # asked for while handling these events (a worker result may end a turn)

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
