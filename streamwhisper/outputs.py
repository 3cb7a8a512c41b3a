"""Transcript writers: plain text, SRT, WebVTT, JSON and an incremental caption writer.

Segments and results are duck-typed (see :class:`SegmentLike`, :class:`ResultLike`): any object
with the right attributes works, and so does a ``dict`` with the same keys (as Whisper's own
``transcribe`` returns). Segment text carries Whisper's leading space; writers strip it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TextIO

__all__ = [
    "CAPTION_FORMATS",
    "FORMATS",
    "CaptionWriter",
    "ResultLike",
    "SegmentLike",
    "WordLike",
    "format_timestamp",
    "result_to_dict",
    "to_json",
    "to_srt",
    "to_txt",
    "to_vtt",
    "write_result",
]

#: Formats :func:`write_result` can write.
FORMATS: Final = ("txt", "srt", "vtt", "json")
#: Formats :class:`CaptionWriter` can append.
CAPTION_FORMATS: Final = ("txt", "srt", "vtt", "jsonl")


class WordLike(Protocol):
    """A timed word, as produced by word-level timestamps."""

    @property
    def word(self) -> str: ...
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def probability(self) -> float: ...


class SegmentLike(Protocol):
    """A transcript segment; it may also have ``words: Sequence[WordLike] | None``."""

    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def text(self) -> str: ...


class ResultLike(Protocol):
    """A transcription result."""

    @property
    def text(self) -> str: ...
    @property
    def language(self) -> str | None: ...
    @property
    def segments(self) -> Sequence[SegmentLike]: ...


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def format_timestamp(
    seconds: float, always_include_hours: bool = False, decimal_marker: str = "."
) -> str:
    """Format seconds as ``[HH:]MM:SS<marker>mmm``, rounded to the millisecond.

    Hours are shown when ``always_include_hours`` is set or the time is an hour or more.
    Raises ``ValueError`` for negative or non-finite times.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"timestamp must be non-negative and finite, got {seconds!r}")
    ms = round(seconds * 1000.0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1_000)
    hours_part = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{hours_part}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def _cue_text(text: str) -> str:
    """Segment text fit for a caption cue: stripped, no blank lines, no ``-->``."""
    lines = [line.strip() for line in text.strip().splitlines()]
    return "\n".join(line for line in lines if line).replace("-->", "->")


def _srt_block(index: int, segment: Any) -> str | None:
    text = _cue_text(_get(segment, "text", ""))
    if not text:
        return None
    start = format_timestamp(float(_get(segment, "start")), True, ",")
    end = format_timestamp(float(_get(segment, "end")), True, ",")
    return f"{index}\n{start} --> {end}\n{text}\n\n"


def _vtt_block(segment: Any) -> str | None:
    text = _cue_text(_get(segment, "text", ""))
    if not text:
        return None
    start = format_timestamp(float(_get(segment, "start")))
    end = format_timestamp(float(_get(segment, "end")))
    return f"{start} --> {end}\n{text}\n\n"


def _txt_line(segment: Any) -> str | None:
    text = " ".join(str(_get(segment, "text", "")).split())
    return f"{text}\n" if text else None


def to_txt(segments: Iterable[SegmentLike]) -> str:
    """One line per segment, text stripped and inner whitespace collapsed; empty text skipped."""
    return "".join(line for line in (_txt_line(seg) for seg in segments) if line is not None)


def to_srt(segments: Iterable[SegmentLike]) -> str:
    """SubRip: 1-based cues ``HH:MM:SS,mmm --> HH:MM:SS,mmm``; empty-text segments skipped."""
    blocks: list[str] = []
    for seg in segments:
        block = _srt_block(len(blocks) + 1, seg)
        if block is not None:
            blocks.append(block)
    return "".join(blocks)


def to_vtt(segments: Iterable[SegmentLike]) -> str:
    """WebVTT: ``WEBVTT`` header, then ``MM:SS.mmm`` cues (hours when needed); no empty cues."""
    blocks = [b for b in (_vtt_block(seg) for seg in segments) if b is not None]
    return "WEBVTT\n\n" + "".join(blocks)


def _segment_to_dict(segment: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "start": round(float(_get(segment, "start")), 3),
        "end": round(float(_get(segment, "end")), 3),
        "text": str(_get(segment, "text", "")),
    }
    words = _get(segment, "words")
    if words:
        out["words"] = [
            {
                "word": str(_get(w, "word", "")),
                "start": round(float(_get(w, "start")), 3),
                "end": round(float(_get(w, "end")), 3),
                "probability": round(float(_get(w, "probability", 0.0)), 4),
            }
            for w in words
        ]
    return out


def result_to_dict(result: ResultLike) -> dict[str, Any]:
    """The JSON-ready dict ``{"text", "language", "segments": [...]}`` of a result.

    Times are rounded to milliseconds and word probabilities to 4 decimals; a segment gets a
    ``"words"`` list only when it has words.
    """
    return {
        "text": str(_get(result, "text", "")),
        "language": _get(result, "language"),
        "segments": [_segment_to_dict(seg) for seg in _get(result, "segments", None) or ()],
    }


def to_json(result: ResultLike) -> str:
    """The result as a JSON document (UTF-8 text, not ASCII-escaped), see :func:`result_to_dict`."""
    return json.dumps(result_to_dict(result), ensure_ascii=False)


def _render(result: ResultLike, fmt: str) -> str:
    segments = _get(result, "segments", None) or ()
    if fmt == "txt":
        return to_txt(segments)
    if fmt == "srt":
        return to_srt(segments)
    if fmt == "vtt":
        return to_vtt(segments)
    if fmt == "json":
        return to_json(result) + "\n"
    raise ValueError(f"unknown output format {fmt!r} (expected one of: {', '.join(FORMATS)})")


def write_result(
    result: ResultLike, path_or_dir: str | Path, fmt: str, *, basename: str = "transcript"
) -> Path:
    """Write ``result`` in ``fmt`` (txt, srt, vtt or json) as UTF-8 and return the path written.

    If ``path_or_dir`` is an existing directory the file is ``<dir>/<basename>.<fmt>``;
    otherwise it is ``path_or_dir`` itself (its parent directory must exist).
    """
    fmt = fmt.lower()
    content = _render(result, fmt)
    target = Path(path_or_dir)
    if target.is_dir():
        target = target / f"{basename}.{fmt}"
    target.write_text(content, encoding="utf-8", newline="\n")
    return target


class CaptionWriter:
    """Append finalised segments one at a time to an open text file, flushing after each.

    ``fmt`` is ``srt`` (numbered cues from ``start_index``), ``vtt`` (a ``WEBVTT`` header is
    written on creation unless ``write_header`` is false), ``txt`` (one line per segment) or
    ``jsonl`` (one JSON object per segment, shaped like a segment of :func:`to_json`).
    Segments with empty text are skipped except in ``jsonl``. The file is not closed.
    """

    def __init__(
        self, fp: TextIO, fmt: str, *, start_index: int = 1, write_header: bool = True
    ) -> None:
        """Wrap ``fp`` for ``fmt``; the VTT header is written (and flushed) immediately."""
        fmt = fmt.lower()
        if fmt not in CAPTION_FORMATS:
            known = ", ".join(CAPTION_FORMATS)
            raise ValueError(f"unknown caption format {fmt!r} (expected one of: {known})")
        self.fp = fp
        self.fmt = fmt
        self.next_index = start_index
        self.count = 0
        if fmt == "vtt" and write_header:
            self._emit("WEBVTT\n\n")

    def _emit(self, text: str) -> None:
        self.fp.write(text)
        self.fp.flush()

    def write(self, segment: SegmentLike) -> bool:
        """Append one segment; return False if it was skipped for having no text."""
        if self.fmt == "jsonl":
            chunk: str | None = json.dumps(_segment_to_dict(segment), ensure_ascii=False) + "\n"
        elif self.fmt == "srt":
            chunk = _srt_block(self.next_index, segment)
        elif self.fmt == "vtt":
            chunk = _vtt_block(segment)
        else:
            chunk = _txt_line(segment)
        if chunk is None:
            return False
        self._emit(chunk)
        if self.fmt == "srt":
            self.next_index += 1
        self.count += 1
        return True

    def write_all(self, segments: Iterable[SegmentLike]) -> int:
        """Append several segments; return how many were written."""
        return sum(1 for seg in segments if self.write(seg))
