"""Where ``listen`` sends its 16 kHz audio: the model in this process, or a daemon.

Both take samples with ``await feed(samples)``, turn everything fed into finals with
``await finish()``, and hand every event to ``on_event`` on the loop as it happens.

* :class:`LocalRecognition` runs the pieces a daemon session runs (a :class:`Streamer`, one
  :class:`InferenceWorker` thread, the recogniser), for one stream.
* :class:`RemoteRecognition` is one session of the native protocol (:mod:`streamwhisper.client`);
  its messages are turned back into the same events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from streamwhisper.client import StreamClient
from streamwhisper.errors import StreamWhisperError
from streamwhisper.events import Error, Event, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.recognizer import Hypothesis, Recognizer
from streamwhisper.streaming.config import StreamingConfig
from streamwhisper.streaming.streamer import Streamer

from streamwhisper.runtime.worker import InferenceWorker, WorkerOverloaded

logger = logging.getLogger(__name__)

EventSink = Callable[[Event], None]


class Recognition(Protocol):
    """16 kHz samples in, events out (to the ``on_event`` it was made with)."""

    async def feed(self, samples: np.ndarray) -> None: ...

    async def finish(self) -> None: ...


class LocalRecognition:
    """One stream through the streaming core and an inference thread of its own.

    Use as ``async with LocalRecognition(recognizer, config, on_event) as rec:``; leaving the
    block stops the worker thread.
    """

    def __init__(self, recognizer: Recognizer, config: StreamingConfig, on_event: EventSink) -> None:
        self._worker = InferenceWorker(recognizer, max_batch=1, max_pending=4)
        self._streamer = Streamer(config, key="listen")
        self._on_event = on_event
        self._inflight: asyncio.Future[Hypothesis] | None = None
        self._finished = asyncio.Event()

    async def __aenter__(self) -> LocalRecognition:
        self._worker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._inflight is not None:
            self._inflight.cancel()
        await self._worker.stop()

    async def feed(self, samples: np.ndarray) -> None:
        if len(samples):
            self._emit(self._streamer.feed(samples))
            self._pump()

    async def finish(self) -> None:
        self._emit(self._streamer.flush())
        self._pump()
        await self._finished.wait()

    def _pump(self) -> None:
        """Hand the streamer's due request to the worker (at most one outstanding)."""
        streamer = self._streamer
        if self._inflight is not None:
            return
        request = streamer.pending_request()
        if request is None:
            if streamer.finished:
                self._finished.set()
            return
        window = streamer.outstanding
        assert window is not None
        try:
            future = self._worker.submit(request, urgent=window.endpoint)
        except WorkerOverloaded:  # only while stopping: the next audio (or flush) retries
            self._emit(streamer.abandon())
            return
        self._inflight = future
        future.add_done_callback(self._on_result)

    def _on_result(self, future: asyncio.Future[Hypothesis]) -> None:
        self._inflight = None
        if future.cancelled():
            self._emit(self._streamer.abandon())
        elif (exc := future.exception()) is not None:
            self._on_event(Error("recognition_failed", f"recognition failed: {type(exc).__name__}: {exc}"))
            self._emit(self._streamer.abandon())
        else:
            self._emit(self._streamer.complete(future.result()))
        self._pump()

    def _emit(self, events: list[Event]) -> None:
        for event in events:
            self._on_event(event)


def event_from_message(message: dict[str, Any]) -> Event | None:
    """A native-protocol server message as an event (None for ready, status, closed, unknown)."""
    kind = message.get("type")
    if kind in ("partial", "final"):
        words = tuple(
            Word(" " + w["word"], float(w["start"]), float(w["end"]), float(w.get("probability", 0.0)))
            for w in message.get("words", ())
        )
        text, start, end, seq = message["text"], float(message["start"]), float(message["end"]), int(message["seq"])
        if kind == "partial":
            return Partial(text, start, end, words, seq)
        return Final(text, start, end, words, seq, bool(message.get("endpoint", False)))
    if kind == "speech_started":
        return SpeechStarted(float(message["time"]))
    if kind == "speech_ended":
        return SpeechEnded(float(message["time"]))
    if kind == "error":
        return Error(str(message.get("code", "error")), str(message.get("message", "")))
    return None


class RemoteRecognition:
    """One native-protocol session with a daemon, sending 16 kHz s16le PCM.

    Use as ``async with RemoteRecognition(url, on_event) as rec:``. Raises StreamWhisperError
    when the server cannot be reached, refuses the session, or closes it before the end.
    """

    def __init__(self, url: str, on_event: EventSink, *, token: str | None = None, **settings: Any) -> None:
        self._url, self._token, self._settings = url, token, settings
        self._on_event = on_event
        self._stack = contextlib.AsyncExitStack()
        self._client: StreamClient | None = None
        self._reader: asyncio.Task[None] | None = None
        self.closed: dict[str, Any] | None = None  # the server's ``closed`` message

    async def __aenter__(self) -> RemoteRecognition:
        connecting = StreamClient.connect(self._url, token=self._token, sample_rate=16000, **self._settings)
        try:
            self._client = await self._stack.enter_async_context(connecting)
        except (OSError, ConnectionError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            raise StreamWhisperError(f"cannot stream to {self._url}: {exc}") from None
        self._reader = asyncio.create_task(self._read(self._client))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self._stack.aclose()

    async def feed(self, samples: np.ndarray) -> None:
        assert self._client is not None
        if not len(samples):
            return
        try:
            await self._client.send_audio(samples)
        except ConnectionClosed:
            raise StreamWhisperError(self._lost()) from None

    async def finish(self) -> None:
        assert self._client is not None and self._reader is not None
        with contextlib.suppress(ConnectionClosed):  # a closed session is reported below
            await self._client.eof()
        await self._reader
        if self.closed is None:
            raise StreamWhisperError(self._lost())

    async def _read(self, client: StreamClient) -> None:
        async for message in client:
            if message.get("type") == "closed":
                self.closed = message
            elif (event := event_from_message(message)) is not None:
                self._on_event(event)

    def _lost(self) -> str:
        code = self._client.close_code if self._client is not None else None
        return f"the server closed the session (close code {code})"
