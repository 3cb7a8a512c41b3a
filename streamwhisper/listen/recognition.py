"""Where ``listen`` sends its 16 kHz audio: the model in this process, or a daemon.

Both take samples with ``await feed(samples)``, turn everything fed into finals with
``await finish()``, and hand every event to ``on_event`` on the loop as it happens.

* :class:`LocalRecognition` runs the pieces a daemon session runs (a :class:`Streamer`, one
  :class:`InferenceWorker` thread, the recogniser), for one stream.
* :class:`~streamwhisper.listen.remote.RemoteRecognition` (``remote.py``) is one session of
  the native protocol with a daemon.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

from streamwhisper.events import Error, Event
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
        self._streamer = Streamer(config, encode_text=recognizer.encode_text, key="listen")
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
