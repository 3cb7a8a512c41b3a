"""Tests for streamwhisper.outputs."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamwhisper.outputs import (
    CaptionWriter,
    format_timestamp,
    result_to_dict,
    to_json,
    to_srt,
    to_txt,
    to_vtt,
    write_result,
)
from streamwhisper.window_loop import Word


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str
    words: tuple[Word, ...] | None = None


@dataclass(frozen=True)
class Result:
    text: str
    language: str | None
    segments: list[Segment] = field(default_factory=list)


SEGMENTS = [
    Segment(0.0, 2.5, " And so my fellow Americans,"),
    Segment(2.5, 5.0123, " ask not what your country can do for you."),
]
RESULT = Result(
    text=" And so my fellow Americans, ask not what your country can do for you.",
    language="en",
    segments=SEGMENTS,
)

GOLDEN_TXT = "And so my fellow Americans,\nask not what your country can do for you.\n"
GOLDEN_SRT = (
    "1\n00:00:00,000 --> 00:00:02,500\nAnd so my fellow Americans,\n\n"
    "2\n00:00:02,500 --> 00:00:05,012\nask not what your country can do for you.\n\n"
)
GOLDEN_VTT = (
    "WEBVTT\n\n"
    "00:00.000 --> 00:02.500\nAnd so my fellow Americans,\n\n"
    "00:02.500 --> 00:05.012\nask not what your country can do for you.\n\n"
)
GOLDEN_JSON = {
    "text": " And so my fellow Americans, ask not what your country can do for you.",
    "language": "en",
    "segments": [
        {"start": 0.0, "end": 2.5, "text": " And so my fellow Americans,"},
        {"start": 2.5, "end": 5.012, "text": " ask not what your country can do for you."},
    ],
}


@pytest.mark.parametrize(
    ("seconds", "hours", "marker", "expected"),
    [
        (0.0, False, ".", "00:00.000"),
        (0.0, True, ",", "00:00:00,000"),
        (1.0004, False, ".", "00:01.000"),
        (59.9996, False, ".", "01:00.000"),
        (61.25, False, ".", "01:01.250"),
        (3599.999, False, ".", "59:59.999"),
        (3600.0, False, ".", "01:00:00.000"),
        (3725.5, True, ",", "01:02:05,500"),
        (36_000.001, False, ".", "10:00:00.001"),
        (90_061.0, False, ".", "25:01:01.000"),
    ],
)
def test_format_timestamp(seconds: float, hours: bool, marker: str, expected: str) -> None:
    assert format_timestamp(seconds, hours, marker) == expected


@pytest.mark.parametrize("bad", [-0.001, float("nan"), float("inf")])
def test_format_timestamp_rejects(bad: float) -> None:
    with pytest.raises(ValueError):
        format_timestamp(bad)


def test_golden_txt_srt_vtt() -> None:
    assert to_txt(SEGMENTS) == GOLDEN_TXT
    assert to_srt(SEGMENTS) == GOLDEN_SRT
    assert to_vtt(SEGMENTS) == GOLDEN_VTT


def test_golden_json() -> None:
    assert json.loads(to_json(RESULT)) == GOLDEN_JSON
    assert result_to_dict(RESULT) == GOLDEN_JSON


def test_json_words_only_when_present() -> None:
    words = (Word(" Hi", 0.0, 0.4, 0.98765), Word(" there", 0.4, 0.9, 0.5))
    segments = [Segment(0.0, 0.9, " Hi there", words), Segment(1, 2, " ünïcode")]
    result = Result(" Hi there ünïcode", None, segments)
    text = to_json(result)
    assert "ünïcode" in text  # not ASCII-escaped
    data = json.loads(text)
    assert data["language"] is None
    assert data["segments"][0]["words"] == [
        {"word": " Hi", "start": 0.0, "end": 0.4, "probability": 0.9877},
        {"word": " there", "start": 0.4, "end": 0.9, "probability": 0.5},
    ]
    assert "words" not in data["segments"][1]


def test_dicts_are_accepted() -> None:
    result = {"text": RESULT.text, "language": "en", "segments": [vars(s) for s in SEGMENTS]}
    assert to_srt(result["segments"]) == GOLDEN_SRT
    assert json.loads(to_json(result)) == GOLDEN_JSON


def test_over_an_hour() -> None:
    segs = [Segment(3661.5, 3662.25, " Late."), Segment(59.0, 61.0, " Early.")]
    assert to_srt(segs) == (
        "1\n01:01:01,500 --> 01:01:02,250\nLate.\n\n2\n00:00:59,000 --> 00:01:01,000\nEarly.\n\n"
    )
    assert to_vtt(segs) == (
        "WEBVTT\n\n01:01:01.500 --> 01:01:02.250\nLate.\n\n00:59.000 --> 01:01.000\nEarly.\n\n"
    )


def test_cue_text_sanitised_and_empty_segments_skipped() -> None:
    segs = [
        Segment(0, 1, "   "),
        Segment(1, 2, " a --> b\n\n second line "),
        Segment(2, 3, ""),
        Segment(3, 4, " end"),
    ]
    assert to_srt(segs) == (
        "1\n00:00:01,000 --> 00:00:02,000\na -> b\nsecond line\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\nend\n\n"
    )
    assert to_txt(segs) == "a --> b second line\nend\n"
    assert to_vtt([]) == "WEBVTT\n\n"
    assert to_srt([]) == ""


GOLDENS = [("txt", GOLDEN_TXT), ("srt", GOLDEN_SRT), ("vtt", GOLDEN_VTT)]


@pytest.mark.parametrize(("fmt", "golden"), GOLDENS)
def test_write_result_to_dir_and_path(tmp_path: Path, fmt: str, golden: str) -> None:
    written = write_result(RESULT, tmp_path, fmt)
    assert written == tmp_path / f"transcript.{fmt}"
    assert written.read_text(encoding="utf-8") == golden
    named = write_result(RESULT, tmp_path / f"clip.{fmt}", fmt)
    assert named == tmp_path / f"clip.{fmt}"
    assert named.read_bytes() == golden.encode("utf-8")


def test_write_result_json_and_basename(tmp_path: Path) -> None:
    written = write_result(RESULT, tmp_path, "JSON", basename="jfk")
    assert written == tmp_path / "jfk.json"
    assert json.loads(written.read_text(encoding="utf-8")) == GOLDEN_JSON


def test_write_result_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tsv"):
        write_result(RESULT, tmp_path, "tsv")
    assert not list(tmp_path.iterdir())


class FlushCounter(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0
        self.seen: list[str] = []

    def flush(self) -> None:
        self.flushes += 1
        self.seen.append(self.getvalue())
        super().flush()


@pytest.mark.parametrize(("fmt", "golden"), GOLDENS)
def test_caption_writer_matches_batch(fmt: str, golden: str) -> None:
    fp = FlushCounter()
    writer = CaptionWriter(fp, fmt)
    assert writer.write(SEGMENTS[0])
    assert golden.startswith(fp.getvalue())  # already on disk after one segment
    assert writer.write(Segment(2.5, 2.5, "  ")) is False  # empty: skipped, index not used
    assert writer.write(SEGMENTS[1])
    assert fp.getvalue() == golden
    assert writer.count == 2
    assert fp.flushes == (3 if fmt == "vtt" else 2)


def test_caption_writer_jsonl() -> None:
    fp = io.StringIO()
    writer = CaptionWriter(fp, "jsonl")
    assert writer.write_all(SEGMENTS) == 2
    lines = fp.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == GOLDEN_JSON["segments"]


def test_caption_writer_srt_continues_numbering(tmp_path: Path) -> None:
    path = tmp_path / "live.srt"
    with path.open("w", encoding="utf-8") as fp:
        CaptionWriter(fp, "srt").write(SEGMENTS[0])
        # the file is readable from outside while still open
        assert path.read_text(encoding="utf-8") == GOLDEN_SRT.split("2\n")[0]
    with path.open("a", encoding="utf-8") as fp:
        CaptionWriter(fp, "srt", start_index=2).write(SEGMENTS[1])
    assert path.read_text(encoding="utf-8") == GOLDEN_SRT


def test_caption_writer_vtt_without_header() -> None:
    fp = io.StringIO()
    CaptionWriter(fp, "vtt", write_header=False).write(SEGMENTS[0])
    assert fp.getvalue() == "00:00.000 --> 00:02.500\nAnd so my fellow Americans,\n\n"


def test_caption_writer_unknown_format() -> None:
    with pytest.raises(ValueError, match="json"):
        CaptionWriter(io.StringIO(), "json")
