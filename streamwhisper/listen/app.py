"""``streamwhisper listen``: live captions from the microphone.

::

    MicSource (PortAudio thread -> loop, at the device's rate) -> StreamResampler (16 kHz)
      -> LocalRecognition (the model in this process) | RemoteRecognition (--server ws://...)
      -> events -> TerminalDisplay (+ CaptionFile with --output)

The first Ctrl-C stops capture; the audio captured so far still becomes finals (shown and
written) before listen returns. A second Ctrl-C aborts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from streamwhisper.audio.convert import StreamResampler
from streamwhisper.config import Config
from streamwhisper.events import Event
from streamwhisper.model.recognizer import Recognizer
from streamwhisper.streaming.config import StreamingConfig

from .captions import CaptionFile, TerminalDisplay, caption_format
from .mic import MicSource
from .recognition import LocalRecognition, Recognition
from .remote import RemoteRecognition


@dataclass(frozen=True)
class ListenOptions:
    """What ``listen`` was asked to do (the command's flags)."""

    device: int | str | None = None  # input device index or name; None: the default input
    server: str | None = None  # ws://host:port of a daemon; None: the model runs in-process
    token: str | None = None  # the daemon's auth token
    output: Path | None = None  # caption file: .srt, .vtt, .txt or .jsonl
    language: str | None = None  # None: detect (English-only models: en)
    task: str = "transcribe"
    partials: bool = True  # show the revisable partial in place


async def capture(source: MicSource, recognition: Recognition) -> None:
    """Feed the source's audio at 16 kHz until it ends (Ctrl-C, end of stream), then finish.

    The source must be open; it is closed before the remaining audio is finalised.
    """
    resampler = StreamResampler(source.samplerate)
    with _interrupts(source):
        source.start()
        try:
            while (block := await source.read()) is not None:
                await recognition.feed(resampler.process(block))
        finally:
            source.close()
        await recognition.feed(resampler.flush())
        await recognition.finish()


@contextlib.contextmanager
def _interrupts(source: MicSource) -> Iterator[None]:
    """Ctrl-C: the first stops the source (its audio still becomes finals), the second aborts."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            source.stop()
        elif task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        yield
        return
    try:
        yield
    except asyncio.CancelledError:
        if presses > 1:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def run_listen(
    options: ListenOptions,
    config: Config,
    load_recognizer: Callable[[], Recognizer],
    *,
    source: MicSource | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Listen until Ctrl-C (or the end of the source); returns the exit code.

    The microphone is opened first, so a machine without one fails before a model is loaded.
    Raises StreamWhisperError (AudioDeviceError without a device, ConfigError for a bad
    ``--output``, connection errors with ``--server``).
    """
    out, err = out or sys.stdout, err or sys.stderr
    if options.output is not None:
        caption_format(options.output)
    source = source or MicSource(options.device)
    source.open()
    try:
        with contextlib.ExitStack() as stack:
            display = TerminalDisplay(out, err, partials=options.partials)
            stack.callback(display.close)
            sinks: list[Callable[[Event], None]] = [display]
            if options.output is not None:
                sinks.append(stack.enter_context(CaptionFile(options.output)))

            def on_event(event: Event) -> None:
                for sink in sinks:
                    sink(event)

            if options.server:
                asyncio.run(_remote(options, source, on_event, err))
            else:
                recognizer = load_recognizer()
                streaming = dataclasses.replace(config.streaming, language=options.language, task=options.task)
                err.write(
                    f"streamwhisper: listening at {source.samplerate} Hz with {config.model.name} (Ctrl-C to stop)\n"
                )
                asyncio.run(_local(recognizer, streaming, source, on_event))
    finally:
        source.close()
    return 0


async def _local(
    recognizer: Recognizer, streaming: StreamingConfig, source: MicSource, on_event: Callable[[Event], None]
) -> None:
    async with LocalRecognition(recognizer, streaming, on_event) as recognition:
        await capture(source, recognition)


async def _remote(options: ListenOptions, source: MicSource, on_event: Callable[[Event], None], err: TextIO) -> None:
    settings = {"language": options.language, "task": options.task, "label": "listen"}
    assert options.server is not None
    async with RemoteRecognition(options.server, on_event, token=options.token, **settings) as recognition:
        err.write(f"streamwhisper: listening at {source.samplerate} Hz via {options.server} (Ctrl-C to stop)\n")
        await capture(source, recognition)
