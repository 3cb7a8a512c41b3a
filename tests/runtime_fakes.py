"""Test doubles for the runtime: a recogniser that hears a word every half second, a scheduler the
test drives by hand, an event loop whose clock the test moves forward, and the real Daemon on
port 0 in the test's own loop.

Nothing here sleeps for time to pass: the worker thread is held and released with
``threading.Event``, and timeouts and limits fire when the test calls :meth:`ClockLoop.advance`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from fakes import fake_encode, hyp
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.audio.vad import SpeechDetector, WebRtcVad
from streamwhisper.config import Config
from streamwhisper.model.interrupt import checkpoint
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.runtime.pump import Done, SchedulerFull
from streamwhisper.runtime.server import Daemon
from streamwhisper.streaming.config import StreamingConfig

SR = 16_000
WORD_S = 0.5  # the fake speaker says one word every half second of the stream


def spoken(i: int) -> tuple[str, float, float]:
    """The i-th word of the stream, ``" w<i>"``, on the stream's clock."""
    return f" w{i}", i * WORD_S + 0.1, i * WORD_S + 0.4


class TimedRecognizer:
    """Hears, in every window, the words of :func:`spoken` that lie wholly inside it.

    A pure function of the request's window (``start``, ``end``), so any batch of any sessions
    gets the right words. ``batches`` records the keys of each call, ``served`` each request as
    the recogniser got it (its ``endpoint`` and ``crowded`` as served). ``hold()`` makes the next
    calls block until ``release()`` (``entered`` is set when a call is held), so a test can
    fill the worker's queue, or keep it saturated, deterministically. Requests whose key is in
    ``fail_on`` make their whole batch raise. With ``checkpoints``, a call passes one of the
    model's interrupt checkpoints after it is released, as the real model does between encoder
    blocks; ``gate(n)`` holds the n-th call (from 0) alone, ``gate(n, after_checkpoint=True)``
    holds it after its checkpoint, before a second one.
    """

    def __init__(self, fail_on: Sequence[object] = (), checkpoints: bool = False) -> None:
        self.batches: list[list[object]] = []
        self.served: list[RecognitionRequest] = []
        self.fail_on = set(fail_on)
        self.checkpoints = checkpoints
        self.entered = threading.Event()
        self._gate = threading.Event()
        self._gate.set()
        self._gates: dict[int, Gate] = {}
        self._mid_gates: dict[int, Gate] = {}

    def hold(self) -> None:
        self.entered.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def gate(self, call: int, after_checkpoint: bool = False) -> Gate:
        """Hold the ``call``-th call until the gate's ``release`` is set."""
        return (self._mid_gates if after_checkpoint else self._gates).setdefault(call, Gate())

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        gate, mid = self._gates.get(len(self.batches)), self._mid_gates.get(len(self.batches))
        self.batches.append([r.key for r in requests])
        self.served.extend(requests)
        if not self._gate.is_set():
            self.entered.set()
            self._gate.wait()
        if gate is not None:
            gate.entered.set()
            gate.release.wait()
        if self.checkpoints:
            checkpoint()
        if mid is not None:
            mid.entered.set()
            mid.release.wait()
            checkpoint()
        if any(r.key in self.fail_on for r in requests):
            raise RuntimeError("scripted recognition failure")
        return [hear(r) for r in requests]

    def encode_text(self, text: str) -> list[int]:
        return fake_encode(text)


@dataclass
class Gate:
    """One held call of :class:`TimedRecognizer`: ``entered`` once it waits, then ``release``."""

    entered: threading.Event = dataclasses.field(default_factory=threading.Event)
    release: threading.Event = dataclasses.field(default_factory=threading.Event)


def hear(request: RecognitionRequest) -> Hypothesis:
    """What the fake speaker said inside the request's window (times relative to its start),
    after its forced prefix (one token per word, :func:`fake_encode`): as the model does, the
    hypothesis goes on after the committed words the window holds."""
    first, last = int(request.start / WORD_S), int(request.end / WORD_S) + 1
    words = [w for w in map(spoken, range(first, last)) if request.start <= w[1] and w[2] <= request.end]
    return hyp(words[len(request.prefix) + len(request.prefix_text.split()) :], request.start)


def request(key: object, endpoint: bool = False, urgent: bool | None = None) -> RecognitionRequest:
    """A small request for scheduler tests (the mel's content does not matter to the fake);
    an endpoint request is urgent unless told otherwise."""
    urgent = endpoint if urgent is None else urgent
    return RecognitionRequest(mel=np.zeros((80, 10), np.float32), key=key, endpoint=endpoint, urgent=urgent)


# --- a scheduler the test drives ---------------------------------------------------------------


@dataclass
class ManualJob:
    request: RecognitionRequest
    done: Done
    cancelled: bool = False
    hastened: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def withdraw(self) -> bool:  # an unanswered job is dropped (the worker drops a running one too)
        self.cancelled = True
        return True

    def hasten(self) -> None:
        self.hastened = True


class ManualScheduler:
    """Keeps every submitted job for the test to answer; ``refuse`` makes ``submit`` raise."""

    def __init__(self) -> None:
        self.jobs: list[ManualJob] = []
        self.refuse = False

    def submit(self, request: RecognitionRequest, done: Done) -> ManualJob:
        if self.refuse:
            raise SchedulerFull("scripted refusal")
        job = ManualJob(request, done)
        self.jobs.append(job)
        return job


# --- a clock the test moves ------------------------------------------------------------------


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose time runs as the wall clock plus what the test skipped.

    :meth:`advance` makes every timer due within ``seconds`` fire at once (asyncio.timeout,
    asyncio.sleep, websockets' keepalive), while sockets and threads run as usual.
    """

    skipped = 0.0

    def time(self) -> float:
        return super().time() + self.skipped

    def advance(self, seconds: float) -> None:
        self.skipped += seconds


def advance(seconds: float) -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, ClockLoop), "run the test with @on_clock_loop"
    loop.advance(seconds)


def on_clock_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh :class:`ClockLoop`."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        with asyncio.Runner(loop_factory=ClockLoop) as runner:
            runner.run(test(*args, **kwargs))

    return run


# --- the real daemon, and its clients ------------------------------------------------------------


@asynccontextmanager
async def running_daemon(recognizer: Any, **server: Any) -> AsyncIterator[Daemon]:
    """The real Daemon on 127.0.0.1 port 0 in this loop, measuring lags on the loop's clock (which
    a :class:`ClockLoop` lets the test move); ``server`` overrides ``[server]`` keys. One inference
    thread unless ``workers`` says otherwise: the tests script that thread (``hold``, gates)."""
    server.setdefault("workers", 1)
    base = Config()
    settings = dataclasses.replace(base.server, host="127.0.0.1", port=0, web_page=False, **server)
    daemon = Daemon(settings, base.streaming, recognizer, "fake", clock=asyncio.get_running_loop().time)
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.shutdown()


def stream_url(daemon: Daemon, query: str = "") -> str:
    return f"ws://127.0.0.1:{daemon.port}/v1/stream" + (f"?{query}" if query else "")


async def send_audio(ws: ClientConnection, audio: np.ndarray, chunk_s: float = 0.1) -> None:
    step = int(chunk_s * SR)
    for i in range(0, len(audio), step):
        await ws.send(float32_to_pcm_s16le(audio[i : i + step]))


async def recv_json(ws: ClientConnection) -> dict[str, Any]:
    message = await ws.recv()
    assert isinstance(message, str)
    return json.loads(message)


async def read_until(ws: ClientConnection, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Messages up to and including the first one ``done`` accepts."""
    out: list[dict[str, Any]] = []
    while not out or not done(out[-1]):
        out.append(await recv_json(ws))
    return out


async def read_to_close(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every message until the server closes the connection."""
    out: list[dict[str, Any]] = []
    try:
        while True:
            out.append(await recv_json(ws))
    except ConnectionClosed:
        return out


def is_partial(m: dict[str, Any]) -> bool:
    return m["type"] == "partial" and bool(m["text"])


def spoken_in_speech(audio: np.ndarray, config: StreamingConfig | None = None) -> list[int]:
    """The numbers of the fake speaker's words that overlap the speech the VAD hears in ``audio``
    (to its last voiced frame and half a pause hold after). The fake speaks on through the
    pauses too, where no model would hear a word: a turn that closes on its pause's hypothesis
    rightly leaves those out."""
    cfg = config or StreamingConfig()
    detector = SpeechDetector(WebRtcVad.from_config(cfg.vad), cfg.vad)
    boundaries = [*detector.feed(audio), *detector.flush()]
    tail = cfg.pause_hold_ms / 2000
    spans = [(a.sample / SR, b.sample / SR + tail) for a, b in zip(boundaries[::2], boundaries[1::2], strict=True)]
    last = int(len(audio) / SR / WORD_S) + 1
    return [i for i in range(last) if any(s < spoken(i)[2] and spoken(i)[1] < e for s, e in spans)]


def final_numbers(messages: list[dict[str, Any]]) -> list[int]:
    """The numbers of the fake speaker's words in the finals (" w<i>" -> i), checking that each
    comes once and in order."""
    numbers = [int(w["word"].removeprefix("w")) for m in messages if m["type"] == "final" for w in m["words"]]
    assert numbers and numbers == sorted(set(numbers)), numbers
    return numbers


# --- a bare WebSocket, for clients no library would write ----------------------------------------


async def raw_websocket(port: int, path: str = "/v1/stream") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A WebSocket over a bare TCP connection: the upgrade is done, nothing of it read yet."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 "), head
    return reader, writer


async def server_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(opcode, payload) of the next frame from the server (unmasked, unfragmented)."""
    first, second = await reader.readexactly(2)
    length = second & 0x7F
    if length >= 126:
        length = int.from_bytes(await reader.readexactly(2 if length == 126 else 8), "big")
    return first & 0x0F, await reader.readexactly(length)


def masked_frame_start(length: int, sent: int) -> bytes:
    """The first bytes of a masked binary client frame of ``length`` bytes: its header and
    ``sent`` bytes of its payload (zeros under the mask)."""
    mask = bytes([0x5A, 0xA5, 0x3C, 0xC3])
    header = bytes([0x82, 0x80 | 127]) + length.to_bytes(8, "big") + mask
    return header + (mask * (sent // 4 + 1))[:sent]
