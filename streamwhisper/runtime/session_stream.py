"""One session's recognition, apart from its connection: client audio -> Pump -> dialect messages.

:class:`SessionStream` owns what a session's connection does not: the settings' Streamer and its
:class:`~streamwhisper.runtime.pump.Pump`, the resampler, the load adaptation (:class:`Pacing`)
and the turn marks. It hands every message to a ``send`` callback, and each final to ``keep``
as well (the replay buffer of a resumable session), so a session whose connection was lost goes
on recognising the audio it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

from streamwhisper.audio.convert import StreamResampler, pcm_to_float32
from streamwhisper.audio.mel import SAMPLE_RATE
from streamwhisper.errors import AudioFormatError, ProtocolError, StreamWhisperError
from streamwhisper.events import Error, Event, Final, Partial
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.streaming.config import StreamingConfig
from streamwhisper.streaming.streamer import Streamer

from . import wire
from .config import ServerConfig
from .dialects import Dialect, SessionInfo, Texts
from .metrics import Metrics
from .pacing import Pacing
from .pump import Outcome, Pump
from .shutdown import Shutdown
from .worker import InferenceWorker


class StreamContext(Protocol):
    """What a stream takes from the daemon (the session's ServerContext)."""

    server: ServerConfig
    streaming: StreamingConfig
    worker: InferenceWorker
    metrics: Metrics
    model_name: str
    shutdown: Shutdown

    @property
    def clock(self) -> Callable[[], float]: ...


class SessionStream:
    """The recognition of one session (see the module's docstring).

    Args:
        ctx: what every session shares.
        info: the session as dialects see it (settings, counts, marks).
        dialect: writes the events.
        send: takes each message, and whether a newer one may replace it while unsent.
        keep: takes each final's seq and message, or None.
    """

    def __init__(
        self,
        ctx: StreamContext,
        info: SessionInfo,
        dialect: Dialect,
        send: Callable[[Texts, bool], None],
        keep: Callable[[int, str], None] | None = None,
    ) -> None:
        self.ctx, self.info, self.dialect = ctx, info, dialect
        self._send, self._keep = send, keep
        server, streaming = ctx.server, ctx.streaming
        max_step = min(server.max_step_s, streaming.max_window_s - streaming.force_commit_s)
        self.pacing = Pacing(server, streaming.min_step_s, max_step, ctx.worker, ctx.clock, self._status)
        self.pump: Pump | None = None
        self._resampler: StreamResampler | None = None
        self._finished = asyncio.Event()
        # set when recognition fails on this stream's audio: the pump gave up, the session ends
        self.failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self.audio_started = False
        self.frames = 0  # sample frames of the client's audio received
        self._received = 0.0  # seconds of 16 kHz audio fed to the streamer

    @property
    def lag(self) -> float:
        """Seconds the transcript lags the audio (see :meth:`Pacing.lag`)."""
        return self.pacing.lag(self.pump)

    def configure(self, settings: wire.SessionSettings) -> None:
        """(Re)start recognition with ``settings``; raises ProtocolError for a model not enabled."""
        if settings.model is not None and settings.model != self.ctx.model_name:
            raise ProtocolError(
                f"model {settings.model!r} is not enabled on this server (enabled: {self.ctx.model_name})",
                wire.CLOSE_POLICY,
                "model_not_enabled",
            )
        self.info.settings = settings
        if self.pump is not None:
            self.pump.close()
        streamer = Streamer(self._streaming_config(settings), key=self.info.id)
        self.pump = Pump(streamer, self.ctx.worker, self._emit, self, self._finished.set, self._failed)
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
            base,
            language=settings.language,
            task=settings.task,
            vad=vad,
            pause_hold_ms=hold,
            pause_final=pause_final,
            eager_pause_finals=settings.eager_finals,
        )

    def close(self) -> None:
        if self.pump is not None:
            self.pump.close()

    def finalize(self) -> None:
        if self.pump is not None:
            self.pump.finalize()

    def take_marks(self) -> None:
        """Hand the marks the dialect asked for (``SessionInfo.marks``) to the pump."""
        marks, self.info.marks = self.info.marks, []
        for then in marks:
            assert self.pump is not None
            self.pump.mark(functools.partial(self._send_answer, then))

    def _send_answer(self, then: Callable[[], Texts]) -> None:
        self._send(then(), False)

    # -- audio and recognition -----------------------------------------------------------------

    def on_audio(self, data: bytes) -> None:
        settings = self.info.settings
        try:
            samples = pcm_to_float32(data, settings.encoding, settings.channels)
        except AudioFormatError as exc:
            raise ProtocolError(str(exc), wire.CLOSE_INVALID, "invalid_audio") from None
        self.audio_started = True
        self.frames += len(samples)
        assert self._resampler is not None
        self._feed(self._resampler.process(samples))
        answer = self.dialect.audio(self.info)
        if answer is not None:
            self._send(*answer)

    def _feed(self, samples: Any) -> None:
        if not len(samples):
            return
        assert self.pump is not None
        seconds = len(samples) / SAMPLE_RATE
        self._received += seconds
        self.info.audio_seconds = self._received
        self.ctx.metrics.add_audio(seconds)
        self.pacing.arrived(self._received)
        self.pump.feed(samples)

    # -- what the pump reports (PumpObserver) --------------------------------------------------

    def result(self, request: RecognitionRequest, outcome: Outcome) -> None:
        if isinstance(outcome, Hypothesis):
            assert self.pump is not None
            self.pacing.adapt(self.pump.streamer, request.end)
        elif outcome is not None:
            self.ctx.metrics.errors.labels("recognition_failed").inc()

    def refused(self, request: RecognitionRequest) -> None:
        self.ctx.metrics.errors.labels("worker_overloaded").inc()

    def _failed(self, exc: BaseException) -> None:
        if not self.failure.done():
            self.failure.set_result(exc)

    def _status(self, lag: float, step: float) -> None:
        self._send(self.dialect.status(lag, step), False)

    async def drain(self) -> None:
        """Turn every sample received into finals: flush the pump and wait for its requests."""
        pump = self.pump
        if pump is None:
            return
        if self._resampler is not None:
            with contextlib.suppress(StreamWhisperError):
                self._feed(self._resampler.flush())
        pump.flush()
        self.take_marks()
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

    def _emit(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Error):
                self._send(self.dialect.error(event.code, event.message), False)
                continue
            if isinstance(event, (Partial, Final)) and event.words:
                latency = self.pacing.latency(event.end)
                if isinstance(event, Final):
                    self.ctx.metrics.final_latency.observe(latency)
                    self.info.words += len(event.words)
                    self.info.finals += 1
                else:
                    self.ctx.metrics.partial_latency.observe(latency)
            texts = self.dialect.event(event, self.info)
            if isinstance(event, Final) and self._keep is not None and isinstance(texts, str):
                self._keep(event.seq, texts)
            self._send(texts, isinstance(event, Partial))
        self.take_marks()  # asked for while handling these events (a worker result may end a turn)
