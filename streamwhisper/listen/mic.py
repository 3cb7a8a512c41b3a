"""The microphone as an audio source: PortAudio's callback thread hands blocks to the event loop.

sounddevice calls :meth:`MicSource._callback` on PortAudio's own thread. The callback copies the
block and enters the loop only through ``loop.call_soon_threadsafe``, into a buffer bounded in
seconds: when the loop falls behind, the oldest audio is dropped with a warning. Everything that
touches sounddevice goes through ``input_stream_factory`` (``sounddevice.InputStream`` by
default), so a test replaces only that boundary and plays a file through the same callback.

The stream is opened at the device's native default sample rate (mono float32); resampling to
16 kHz is the caller's business (:class:`~streamwhisper.audio.convert.StreamResampler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from streamwhisper.errors import AudioDeviceError

logger = logging.getLogger(__name__)

NO_INPUT_DEVICE = "no audio input device found (is a microphone connected? `streamwhisper listen --list-devices`)"
NO_INPUT_DEVICES = "no audio input devices found (is a microphone connected?)"  # what --list-devices says


class InputStreamLike(Protocol):
    """The part of ``sounddevice.InputStream`` that :class:`MicSource` uses."""

    @property
    def samplerate(self) -> float: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...


#: Called like ``sounddevice.InputStream(device=, samplerate=None, channels=1, dtype="float32",
#: callback=, finished_callback=)``; ``callback(indata, frames, time, status)`` runs on another thread.
InputStreamFactory = Callable[..., InputStreamLike]


def _sounddevice() -> ModuleType:
    """The sounddevice module; AudioDeviceError when its PortAudio library is missing."""
    try:
        import sounddevice
    except (OSError, ImportError) as exc:  # OSError: sounddevice could not load libportaudio
        raise AudioDeviceError(
            f"PortAudio is not available ({exc}); install it (Debian/Ubuntu: apt-get install libportaudio2)"
        ) from None
    return sounddevice


def default_input_stream_factory() -> InputStreamFactory:
    """``sounddevice.InputStream`` (imported on first use)."""
    factory: InputStreamFactory = _sounddevice().InputStream
    return factory


def parse_device(spec: str | None) -> int | str | None:
    """A ``--device`` value: an index ("3"), a (part of a) device name, or None for the default."""
    if spec is None or not spec.strip():
        return None
    spec = spec.strip()
    return int(spec) if spec.isdigit() else spec


@dataclass(frozen=True)
class InputDevice:
    """One audio input device as PortAudio reports it."""

    index: int
    name: str
    channels: int
    samplerate: float
    hostapi: str
    default: bool


def input_devices(
    devices: Sequence[dict[str, Any]], hostapis: Sequence[dict[str, Any]], default: int
) -> list[InputDevice]:
    """The input devices among ``sounddevice.query_devices()`` entries."""
    out = []
    for i, d in enumerate(devices):
        if d.get("max_input_channels", 0) < 1:
            continue
        index = int(d.get("index", i))
        api = d.get("hostapi")
        api_name = hostapis[api]["name"] if isinstance(api, int) and 0 <= api < len(hostapis) else ""
        out.append(
            InputDevice(
                index,
                d["name"],
                int(d["max_input_channels"]),
                float(d["default_samplerate"]),
                api_name,
                index == default,
            )
        )
    return out


def list_input_devices() -> list[InputDevice]:
    """The machine's input devices (AudioDeviceError when PortAudio is missing)."""
    sd = _sounddevice()
    try:
        default = int(sd.query_devices(kind="input")["index"])
    except sd.PortAudioError:  # no default input device
        default = -1
    return input_devices(list(sd.query_devices()), list(sd.query_hostapis()), default)


def format_devices(devices: Sequence[InputDevice]) -> str:
    """The ``--list-devices`` table: ``*`` marks the default; use the index or a name with --device."""
    lines = [
        f"{'*' if d.default else ' '} {d.index:>3}  {d.name}  ({d.hostapi}, {d.channels} ch, {d.samplerate:g} Hz)"
        for d in devices
    ]
    return "\n".join(lines) + "\n(* default; choose one with --device INDEX or --device NAME)\n"


class MicSource:
    """Mono float32 blocks from an input device, at its native rate, as an async source.

    ``open()`` creates the stream (and fails early, e.g. without a device); ``start()`` starts
    capture on the running loop; ``read()`` returns the next block, or None once the source was
    stopped (``stop()``, Ctrl-C) or the stream finished and every buffered block was read.

    Args:
        device: device index, (part of a) name, or None for the default input.
        max_buffer_s: most audio held for the loop; beyond it the oldest blocks are dropped.
        input_stream_factory: ``sounddevice.InputStream`` or a stand-in with its signature.
    """

    def __init__(
        self,
        device: int | str | None = None,
        *,
        max_buffer_s: float = 10.0,
        input_stream_factory: InputStreamFactory | None = None,
    ) -> None:
        self.device = device
        self._max_buffer_s = max_buffer_s
        self._factory = input_stream_factory
        self._stream: InputStreamLike | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._blocks: deque[np.ndarray] = deque()
        self._buffered = 0  # samples in _blocks
        self._ready = asyncio.Event()
        self._ended = False
        self._dropping = False
        self.dropped = 0  # samples dropped because the loop fell behind

    @property
    def samplerate(self) -> int:
        """The stream's sample rate (Hz); after :meth:`open`."""
        assert self._stream is not None, "open() first"
        return int(round(self._stream.samplerate))

    def open(self) -> None:
        """Create the input stream (not started yet). Raises AudioDeviceError."""
        factory = self._factory or default_input_stream_factory()
        try:
            self._stream = factory(
                device=self.device,
                samplerate=None,  # the device's default rate: no resampling inside PortAudio
                channels=1,
                dtype="float32",
                callback=self._callback,
                finished_callback=self._finished_callback,
            )
        except Exception as exc:  # PortAudioError or ValueError (no such device): one clear message
            if self.device is None:
                raise AudioDeviceError(NO_INPUT_DEVICE) from None
            raise AudioDeviceError(
                f"cannot open audio input device {self.device!r}: {exc} (`streamwhisper listen --list-devices`)"
            ) from None

    def start(self) -> None:
        """Start capturing; blocks go to the running loop."""
        if self._stream is None:
            self.open()
        assert self._stream is not None
        self._loop = asyncio.get_running_loop()
        self._stream.start()

    def stop(self) -> None:
        """End the source (on the loop): blocks already buffered are still read, then None."""
        self._ended = True
        self._ready.set()

    def close(self) -> None:
        """Stop and close the stream (idempotent)."""
        self.stop()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.stop()
            stream.close()

    async def read(self) -> np.ndarray | None:
        """The next block (1-D float32 at :attr:`samplerate`), or None at the end."""
        while not self._blocks:
            if self._ended:
                return None
            self._ready.clear()
            await self._ready.wait()
        block = self._blocks.popleft()
        self._buffered -= len(block)
        return block

    # -- PortAudio's thread ----------------------------------------------------------------------

    def _callback(self, indata: np.ndarray, frames: int, time: Any, status: Any) -> None:
        block = np.array(indata[:frames, 0], dtype=np.float32)  # PortAudio reuses its buffer
        self._to_loop(self._put, block, str(status) if status else "")

    def _finished_callback(self) -> None:
        self._to_loop(self.stop)

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens any more
            loop.call_soon_threadsafe(fn, *args)

    # -- the loop ----------------------------------------------------------------------------------

    def _put(self, block: np.ndarray, status: str) -> None:
        if status:
            logger.warning("audio input: %s", status)
        if self._ended:
            return
        self._blocks.append(block)
        self._buffered += len(block)
        limit = int(self._max_buffer_s * self.samplerate) if self._stream is not None else None
        dropped = 0
        while limit is not None and self._buffered > limit and len(self._blocks) > 1:
            old = self._blocks.popleft()
            self._buffered -= len(old)
            dropped += len(old)
        if dropped:
            self.dropped += dropped
            if not self._dropping:  # once per episode, not once per block
                logger.warning(
                    "microphone audio dropped: the transcriber fell more than %g s behind", self._max_buffer_s
                )
            self._dropping = True
        elif self._buffered < (limit or 0) // 2:
            self._dropping = False
        self._ready.set()
