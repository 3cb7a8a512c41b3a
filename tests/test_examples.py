"""The examples against a real daemon: the Python client and the meeting bot, with real speech."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from live_server import LiveServer

from benchmarks.scoring import Clip, word_error_rate
from streamwhisper.events import Final, Partial, Word

pytestmark = pytest.mark.slow  # end to end: the real model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CLEAR_LINE = "\r\x1b[2K"


def load_example(relative: str) -> ModuleType:
    """Import an example script as a module (examples/ is not a package)."""
    path = EXAMPLES / relative
    name = "example_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bot() -> ModuleType:
    return load_example("meeting_bot/bot.py")


@pytest.fixture(scope="module")
def clips_by_file(clips: dict[str, Clip]) -> dict[str, Clip]:
    return {c.wav.name: c for c in clips.values()}


def test_python_client_prints_partials_in_place_and_finals_as_lines(serving_model, clips, capsys) -> None:
    client = load_example("python_client.py")
    jfk = clips["en_jfk"]
    with LiveServer(serving_model) as server:
        assert client.main([str(jfk.wav), "--url", server.url, "--speed", "2"]) == 0
    out, err = capsys.readouterr()
    lines = out.split("\n")
    assert lines[-1] == "", "every final ends its line"
    finals = [line.split(CLEAR_LINE)[-1] for line in lines[:-1]]
    partials = [p for line in lines[:-1] for p in line.split(CLEAR_LINE)[:-1] if p]
    assert partials and all(finals)
    assert word_error_rate([jfk.reference], [" ".join(finals)]) <= 0.2, finals  # a repeated phrase: >= 0.23
    assert err.startswith("closed (eof): 11.0 s of audio")


def test_meeting_bot_posts_one_time_ordered_labelled_transcript(bot, serving_model, clips_by_file) -> None:
    participants = bot.demo_participants(speed=2.0)
    assert {p.sample_rate for p in participants} == {48_000, 16_000, 44_100}
    posted: list = []
    with LiveServer(serving_model, max_sessions=4) as server:
        meeting = bot.MeetingBot(server.url, posted.append)
        lines = asyncio.run(bot.run_meeting(meeting, participants, speed=2.0))
    names = [p.name for p in participants]
    assert meeting.labels == {name: name for name in names}, "each session's config carries its speaker"
    assert lines == sorted(lines, key=lambda line: (line.start, line.speaker)), "meeting order"
    assert sorted(posted, key=lambda line: (line.start, line.speaker)) == lines, "every line was posted once"
    for p in participants:
        mine = [line for line in lines if line.speaker == p.name]
        clip = clips_by_file[p.path.name]
        assert mine, f"{p.name} said nothing?"
        for line in mine:  # on the meeting clock: within the participant's own time
            assert p.joined_at - 0.5 <= line.start <= line.end <= p.joined_at + clip.seconds + 0.5, line
        text = " ".join(line.text for line in mine)
        assert word_error_rate([clip.reference], [text]) <= 0.25, f"{p.name}: {text!r}"  # no sentence said twice
    # Alice opens the meeting, Bob joins while she still speaks, Carol has the last word
    speakers = [line.speaker for line in lines]
    assert speakers[0] == "Alice" and speakers[-1] == "Carol" and "Bob" in speakers
    print("\n".join(line.format() for line in lines))


def test_transcript_holds_a_line_until_earlier_speech_is_final(bot) -> None:
    def final(text: str, start: float, end: float, endpoint: bool) -> Final:
        words = tuple(Word(w, start, end, 1.0) for w in text.split())
        return Final(text, start, end, words, 0, endpoint)

    transcript = bot.Transcript()
    transcript.add("Ann", 0.0, Partial("so", 1.0, 1.4, (Word("so", 1.2, 1.4, 1.0),), 0))
    transcript.add("Ben", 2.0, final("hello", 1.0, 1.5, endpoint=True))  # Ben joined at 2 s: 3.0 on the meeting clock
    assert transcript.postable() == [], "Ann's utterance began at 1.2 s and is not final yet"
    transcript.add("Ann", 0.0, final("so we begin", 1.2, 2.5, endpoint=False))
    assert transcript.postable() == []
    transcript.add("Ann", 0.0, final("now", 2.6, 3.5, endpoint=True))
    posted = transcript.postable()
    assert [(line.speaker, line.text, line.start) for line in posted] == [
        ("Ann", "so we begin now", 1.2),
        ("Ben", "hello", 3.0),
    ]
    transcript.add("Ann", 0.0, final("", 4.0, 4.0, endpoint=True))  # an utterance without text: no line
    assert transcript.postable() == [] and transcript.flush() == []
    assert [line.format() for line in transcript.lines()] == ["[00:01.2] Ann: so we begin now", "[00:03.0] Ben: hello"]
