#!/usr/bin/env python
"""A meeting bot: one streamwhisper session per participant, one merged, labelled transcript.

::

    streamwhisper serve --port 8765                       # in another terminal
    python examples/meeting_bot/bot.py                    # three eval clips join a demo meeting
    python examples/meeting_bot/bot.py Ann=a.wav@0 Ben=b.mp3@4.5 --url ws://127.0.0.1:8765

Each participant's audio goes to its own session (its ``config`` message names the speaker in
``label``), so crosstalk never mixes two voices in one recognizer. Finals of one utterance are
joined into a line; a line is posted once no participant still speaks in an utterance that
started earlier, so the posted transcript reads in meeting order. README.md explains how to
feed a real platform's per-participant audio (:class:`ParticipantAudio`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from streamwhisper.audio.convert import float32_to_pcm_s16le
from streamwhisper.audio.files import load_audio
from streamwhisper.client import ConfigMessage, Ready, ServerMessage, StreamClient, Unknown
from streamwhisper.errors import StreamWhisperError
from streamwhisper.events import Error, Final, Partial

logger = logging.getLogger("meeting_bot")


# -- the merged transcript (pure: messages in, lines out) --------------------------------------


@dataclass(frozen=True)
class Line:
    """One utterance of one speaker, on the meeting clock (seconds since the meeting began)."""

    start: float
    end: float
    speaker: str
    text: str

    def format(self) -> str:
        minutes, seconds = divmod(self.start, 60)
        return f"[{int(minutes):02d}:{seconds:04.1f}] {self.speaker}: {self.text}"


@dataclass
class _Utterance:
    texts: list[str] = field(default_factory=list)
    start: float = math.inf  # of its first final word
    end: float = 0.0
    partial_start: float | None = None  # of the partial shown, while no final came yet

    @property
    def open_since(self) -> float | None:
        """Where this speaker's unfinished speech starts, or None when nothing is pending."""
        return self.start if self.texts else self.partial_start


class Transcript:
    """Merges several sessions' messages into time-ordered :class:`Line` objects.

    Session times are seconds of that participant's audio; ``offset`` (when the participant's
    first audio frame was in the meeting) moves them onto the meeting clock.
    """

    def __init__(self) -> None:
        self._open: dict[str, _Utterance] = {}
        self._done: list[Line] = []
        self._posted = 0

    def add(self, speaker: str, offset: float, message: ServerMessage | Unknown) -> None:
        """Take one server message of ``speaker``'s session (only partials and finals count)."""
        utterance = self._open.setdefault(speaker, _Utterance())
        if isinstance(message, Partial):
            utterance.partial_start = offset + _first_word_start(message) if message.text else None
        elif isinstance(message, Final):
            if message.text:
                utterance.texts.append(message.text)
                utterance.start = min(utterance.start, offset + _first_word_start(message))
                utterance.end = max(utterance.end, offset + message.end)
            utterance.partial_start = None
            if message.endpoint:
                if utterance.texts:
                    self._done.append(Line(utterance.start, utterance.end, speaker, " ".join(utterance.texts)))
                self._open[speaker] = _Utterance()

    def postable(self) -> list[Line]:
        """Finished lines not posted yet that no earlier, still open utterance can precede."""
        pending = [u.open_since for u in self._open.values() if u.open_since is not None]
        return self._take(min(pending, default=math.inf))

    def flush(self) -> list[Line]:
        """Every finished line not posted yet (all sessions ended)."""
        return self._take(math.inf)

    def lines(self) -> list[Line]:
        """The whole transcript so far, in meeting order."""
        return sorted(self._done, key=lambda line: (line.start, line.speaker))

    def _take(self, before: float) -> list[Line]:
        waiting = sorted(self._done[self._posted :], key=lambda line: (line.start, line.speaker))
        ready = [line for line in waiting if line.start <= before]
        # keep _done as posted-first so that _posted indexes the lines still waiting
        self._done[self._posted :] = ready + [line for line in waiting if line.start > before]
        self._posted += len(ready)
        return ready


def _first_word_start(message: Partial | Final) -> float:
    return message.words[0].start if message.words else message.start


# -- participants and sessions -------------------------------------------------------------------


class ParticipantAudio(Protocol):
    """What the bot needs per participant: a name, PCM frames, their format, and when they began.

    ``frames()`` yields raw PCM (``encoding`` at ``sample_rate`` Hz, mono) as the platform
    delivers it, with silence where the participant is quiet, and ends when they leave.
    """

    name: str
    sample_rate: int
    encoding: str  # "pcm_s16le" or "pcm_f32le"
    joined_at: float  # meeting seconds at the first frame

    def frames(self) -> AsyncIterator[bytes]: ...


@dataclass
class FileParticipant:
    """A participant played from an audio file at ``speed`` x real time, in 20 ms frames."""

    name: str
    path: Path
    joined_at: float
    sample_rate: int = 48_000  # what WebRTC-based platforms deliver
    encoding: str = "pcm_s16le"
    speed: float = 1.0
    frame_ms: int = 20

    async def frames(self) -> AsyncIterator[bytes]:
        audio = load_audio(self.path, self.sample_rate)
        step = self.sample_rate * self.frame_ms // 1000
        loop = asyncio.get_running_loop()
        began = loop.time()
        for i in range(0, len(audio), step):
            yield _encode(audio[i : i + step], self.encoding)
            if self.speed > 0:
                await asyncio.sleep(max(0.0, began + (i + step) / self.sample_rate / self.speed - loop.time()))


def _encode(samples: np.ndarray, encoding: str) -> bytes:
    return float32_to_pcm_s16le(samples) if encoding == "pcm_s16le" else samples.astype("<f4").tobytes()


class MeetingBot:
    """Opens a session per participant that joins, and posts the merged transcript line by line.

    Args:
        url: the daemon, ``ws://host:port``.
        post: called with each :class:`Line` as it can be posted (e.g. sent to the meeting chat).
        token: the daemon's auth token, if any.
        language: a language code for every session, or None to let the model detect it.
    """

    def __init__(
        self, url: str, post: Callable[[Line], None], *, token: str | None = None, language: str | None = None
    ) -> None:
        self.url, self.post, self.token, self.language = url, post, token, language
        self.transcript = Transcript()
        self.labels: dict[str, str] = {}  # participant -> the label the server confirmed

    async def join(self, participant: ParticipantAudio) -> None:
        """Stream one participant until their audio ends; their last words become final."""
        config: dict[str, Any] = {
            "sample_rate": participant.sample_rate,
            "encoding": participant.encoding,
            "label": participant.name,
        }
        if self.language:
            config["language"] = self.language
        async with StreamClient.connect(self.url, token=self.token) as client:
            await client.send(ConfigMessage(config))  # before any audio: the session restarts with it
            reader = asyncio.create_task(self._read(client, participant))
            async for frame in participant.frames():
                await client.send_audio(frame)
            await client.eof()
            await reader

    async def _read(self, client: StreamClient, participant: ParticipantAudio) -> None:
        async for message in client:
            if isinstance(message, Ready):
                self.labels[participant.name] = message.config.label
            elif isinstance(message, Error):
                logger.warning("%s: %s: %s", participant.name, message.code, message.message)
            self.transcript.add(participant.name, participant.joined_at, message)
            for line in self.transcript.postable():
                self.post(line)

    def finish(self) -> list[Line]:
        """Post what is left; the whole transcript in meeting order."""
        for line in self.transcript.flush():
            self.post(line)
        return self.transcript.lines()


async def run_meeting(meeting: MeetingBot, participants: list[FileParticipant], *, speed: float = 1.0) -> list[Line]:
    """Participants join at their ``joined_at`` (scaled by ``speed``); returns the transcript."""

    async def arrive(participant: FileParticipant) -> None:
        await asyncio.sleep(participant.joined_at / speed if speed > 0 else 0)
        await meeting.join(participant)

    await asyncio.gather(*(arrive(p) for p in participants))
    return meeting.finish()


# -- the demo -------------------------------------------------------------------------------------

CLIPS = Path(__file__).resolve().parents[2] / "tests" / "data" / "audio"  # clips that ship with the repository
# (speaker, clip, joins at, audio format): Bob starts before Alice is done; each platform
# delivers its own rate and sample type, the server resamples.
DEMO: list[tuple[str, str, float, dict[str, Any]]] = [
    ("Alice", "en_jfk.flac", 0.0, {"sample_rate": 48_000, "encoding": "pcm_s16le"}),
    ("Bob", "en_ls_dev_1272-128104-0000.flac", 9.0, {"sample_rate": 16_000, "encoding": "pcm_f32le"}),
    ("Carol", "en_arctic_a0010.flac", 16.0, {"sample_rate": 44_100, "encoding": "pcm_s16le"}),
]


def demo_participants(speed: float, folder: Path = CLIPS) -> list[FileParticipant]:
    """The demo meeting: three clips of the repository's test data."""
    return [FileParticipant(name, folder / clip, at, speed=speed, **fmt) for name, clip, at, fmt in DEMO]


def parse_participant(spec: str, speed: float) -> FileParticipant:
    """``NAME=FILE@SECONDS`` (``@SECONDS`` optional: joins at 0)."""
    name, _, rest = spec.partition("=")
    path, _, at = rest.rpartition("@") if "@" in rest else (rest, "", "0")
    if not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE@SECONDS, got {spec!r}")
    return FileParticipant(name, Path(path), float(at), speed=speed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("participants", nargs="*", metavar="NAME=FILE@SECONDS", help="default: three eval clips")
    parser.add_argument("--url", default="ws://127.0.0.1:8765", help="the daemon (default ws://127.0.0.1:8765)")
    parser.add_argument("--token", help="the daemon's auth token, if it has one")
    parser.add_argument("--speed", type=float, default=1.0, help="x real time (default 1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

    if args.participants:
        participants = [parse_participant(spec, args.speed) for spec in args.participants]
    else:
        participants = demo_participants(args.speed)

    def post(line: Line) -> None:
        print(line.format(), flush=True)

    try:
        asyncio.run(run_meeting(MeetingBot(args.url, post, token=args.token), participants, speed=args.speed))
    except (StreamWhisperError, OSError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
