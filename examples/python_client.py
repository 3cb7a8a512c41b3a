#!/usr/bin/env python
"""Stream an audio file to a streamwhisper daemon at real time and print the captions live.

::

    streamwhisper serve                                   # in another terminal
    python examples/python_client.py talk.wav             # any format PyAV reads
    python examples/python_client.py talk.mp3 --url ws://10.0.0.5:8765 --speed 2 --token s3cret

The revisable partial is rewritten in place on one line (``\\r`` + clear line); each final is
printed as a line of its own. Server errors and the session summary go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TextIO

from streamwhisper.audio.files import load_audio
from streamwhisper.client import Closed, ServerMessage, Unknown, stream_file
from streamwhisper.errors import StreamWhisperError
from streamwhisper.events import Error, Final, Partial

CLEAR_LINE = "\r\x1b[2K"


class CaptionPrinter:
    """``on_message`` for :func:`stream_file`: partial in place, finals as lines."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.partial_shown = False

    def __call__(self, message: ServerMessage | Unknown, sent_s: float) -> None:
        match message:
            case Partial(text=text):
                self.out.write(CLEAR_LINE + text)
                self.partial_shown = bool(text)
            case Final(text=text) if text or self.partial_shown:
                self.out.write(CLEAR_LINE + (text + "\n" if text else ""))
                self.partial_shown = False
            case Error(code=code, message=text):
                self.err.write(f"server error {code}: {text}\n")
            case Closed():
                self.err.write(
                    f"closed ({message.reason}): {message.audio_seconds:.1f} s of audio, "
                    f"{message.words} words in {message.finals} finals\n"
                )
        self.out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", help="audio or video file")
    parser.add_argument("--url", default="ws://127.0.0.1:8765", help="the daemon (default ws://127.0.0.1:8765)")
    parser.add_argument("--speed", type=float, default=1.0, help="x real time (default 1; 0 = as fast as possible)")
    parser.add_argument("--language", help="language code, or leave it to the model")
    parser.add_argument("--token", help="the daemon's auth token, if it has one")
    args = parser.parse_args(argv)

    printer = CaptionPrinter(sys.stdout, sys.stderr)
    try:
        audio = load_audio(args.file)  # 16 kHz mono float32; stream_file sends it as pcm_s16le
        asyncio.run(
            stream_file(args.url, audio, speed=args.speed, on_message=printer, token=args.token, language=args.language)
        )
    except (StreamWhisperError, OSError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
