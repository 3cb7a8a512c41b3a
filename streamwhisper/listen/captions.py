"""Where ``listen`` shows and keeps its events: the terminal and a caption file.

:class:`TerminalDisplay` keeps the current partial on one line, rewritten in place (``\\r`` and
clear-line), and appends each final as a line. :class:`CaptionFile` appends every final with text
to a .srt, .vtt, .txt or .jsonl file (chosen by its extension) and flushes it, so the file is
complete up to the last final at any moment.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType
from typing import TextIO

from streamwhisper.errors import ConfigError
from streamwhisper.events import Error, Event, Final, Partial
from streamwhisper.outputs import CAPTION_FORMATS, CaptionWriter

CLEAR_LINE = "\r\x1b[2K"


class TerminalDisplay:
    """Partials in place on one line (when ``partials``), finals as lines, errors on ``err``."""

    def __init__(self, out: TextIO, err: TextIO, *, partials: bool, width: int | None = None) -> None:
        self._out, self._err = out, err
        self._partials = partials
        self._width = width
        self._shown = False  # a partial is on the current line

    def __call__(self, event: Event) -> None:
        if isinstance(event, Partial):
            if self._partials:
                self._write(CLEAR_LINE + self._fit(event.text) if event.text else CLEAR_LINE)
                self._shown = bool(event.text)
        elif isinstance(event, Final):
            if event.text:
                self._write(self._clear() + event.text + "\n")
            elif self._shown and event.endpoint:  # an empty final ends the utterance: drop its partial
                self._write(self._clear())
        elif isinstance(event, Error):
            self._clear_now()
            self._err.write(f"streamwhisper: {event.code}: {event.message}\n")
            self._err.flush()

    def close(self) -> None:
        """Clear a partial left on the line."""
        self._clear_now()

    def _clear(self) -> str:
        shown, self._shown = self._shown, False
        return CLEAR_LINE if shown else ""

    def _clear_now(self) -> None:
        if self._shown:
            self._write(self._clear())

    def _fit(self, text: str) -> str:
        """The end of ``text`` that fits one line (a wrapped line could not be rewritten)."""
        width = self._width or shutil.get_terminal_size((80, 24)).columns
        room = max(width - 1, 10)
        return text if len(text) <= room else "…" + text[-(room - 1) :]

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def caption_format(path: str | Path) -> str:
    """The caption format for an output path, by extension; ConfigError for any other."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in CAPTION_FORMATS:
        known = ", ".join("." + f for f in CAPTION_FORMATS)
        raise ConfigError(f"--output {path}: unknown caption format {suffix or '(no extension)'!r} (use {known})")
    return suffix


class CaptionFile:
    """Append every final with text to ``path`` as a caption, flushed per final."""

    def __init__(self, path: str | Path) -> None:
        fmt = caption_format(path)
        try:
            self._fp = open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115 (closed in close())
        except OSError as exc:
            raise ConfigError(f"--output {path}: {exc.strerror or exc}") from None
        self.writer = CaptionWriter(self._fp, fmt)

    def __call__(self, event: Event) -> None:
        if isinstance(event, Final) and event.text:
            self.writer.write(event)

    def close(self) -> None:
        self._fp.close()

    def __enter__(self) -> CaptionFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
