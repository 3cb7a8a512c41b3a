"""Where ``listen`` sends its 16 kHz audio: the model in this process, or a daemon.

Both take samples with ``await feed(samples)``, turn everything fed into finals with
``await finish()``, and hand every event to ``on_event`` on the loop as it happens.

* :class:`LocalRecognition` runs what a daemon session runs (a :class:`Pump` driving a
  :class:`Streamer`, one :class:`InferenceWorker` thread, the recogniser), for one stream.
* :class:`~streamwhisper.listen.remote.RemoteRecognition` (``remote.py``) is one session of
  the native protocol with a daemon.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

from streamwhisper.events import Event
from streamwhisper.model.cpu_threads import core_sharing
from streamwhisper.model.recognizer import Recognizer
from streamwhisper.runtime.pump import Pump
from streamwhisper.runtime.worker import InferenceWorker
from streamwhisper.streaming.config import StreamingConfig
from streamwhisper.streaming.streamer import Streamer

logger = logging.getLogger(__name__)

EventSink = Callable[[Event], None]


class Recognition(Protocol):
    """16 kHz samples in, events out (to the ``on_event`` it was made with)."""

    async def feed(self, samples: np.ndarray) -> None: ...

    async def finish(self) -> None: ...


class LocalRecognition:
    """One stream through the daemon's driver: a :class:`Pump` and an inference thread of its own.

    Use as ``async with LocalRecognition(recognizer, config, on_event) as rec:``; leaving the
    block stops the worker thread.
    """

    def __init__(self, recognizer: Recognizer, config: StreamingConfig, on_event: EventSink) -> None:
        # (a turn's final runs on the worker's spare thread: each gives its OpenMP team back)
        self._worker = InferenceWorker(recognizer, max_batch=1, max_pending=4, on_share=core_sharing(1))
        self._on_event = on_event
        self._finished = asyncio.Event()
        self._pump = Pump(Streamer(config, key="listen"), self._worker, self._emit, on_finished=self._finished.set)

    async def __aenter__(self) -> LocalRecognition:
        self._worker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._pump.close()
        await self._worker.stop()

    async def feed(self, samples: np.ndarray) -> None:
        self._pump.feed(samples)

    async def finish(self) -> None:
        self._pump.flush()
        await self._finished.wait()

    def _emit(self, events: list[Event]) -> None:
        for event in events:
            self._on_event(event)
