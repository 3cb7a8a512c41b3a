"""Shared helpers for the benchmark scripts: audio, timing, medians, peak RSS, JSON lines, tables.

Standard library and numpy only at import time: a benchmark worker for a peer engine (for example
faster-whisper, which never imports torch) must not pay for torch or streamwhisper just by
importing this module, or its peak RSS would be inflated.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
import wave
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_RATE = 16_000
REPO = Path(__file__).resolve().parents[1]
JSON_PREFIX = "@@BENCH@@ "  # marks a worker's result lines among whatever else a library prints

if str(REPO) not in sys.path:  # measure the working tree's streamwhisper, installed or not
    sys.path.insert(1, str(REPO))


def shared_data_dir() -> Path:
    """The evaluation data folder: $STREAMWHISPER_SHARED_DATA, else ../shared/data beside the repository."""
    env = os.environ.get("STREAMWHISPER_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


def load_wav(path: str | os.PathLike[str], max_seconds: float | None = None) -> np.ndarray:
    """16 kHz mono float32 in [-1, 1]; 16-bit mono 16 kHz wav is read directly, anything else via
    streamwhisper's PyAV decoder (imported only then)."""
    audio: np.ndarray | None = None
    try:
        with wave.open(os.fspath(path), "rb") as w:
            if w.getnchannels() == 1 and w.getsampwidth() == 2 and w.getframerate() == SAMPLE_RATE:
                raw = w.readframes(w.getnframes())
                audio = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    except (wave.Error, EOFError):
        audio = None
    if audio is None:
        from streamwhisper.audio.files import load_audio

        audio = np.asarray(load_audio(os.fspath(path)), dtype=np.float32)
    if max_seconds is not None:
        audio = audio[: int(max_seconds * SAMPLE_RATE)]
    return np.ascontiguousarray(audio, dtype=np.float32)


def set_thread_env(threads: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default os.environ) with OpenMP/MKL/BLAS thread counts set."""
    out = dict(os.environ if env is None else env)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        out[var] = str(threads)
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds, result) of one call."""
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def current_rss_mb() -> float | None:
    """Resident set size of this process now, in MiB (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return None


def emit(record: dict[str, Any]) -> None:
    """Print one result line for the parent process to collect."""
    print(JSON_PREFIX + json.dumps(record, sort_keys=True), flush=True)


def collect(stdout: str) -> list[dict[str, Any]]:
    """The result lines a worker printed."""
    return [json.loads(line[len(JSON_PREFIX) :]) for line in stdout.splitlines() if line.startswith(JSON_PREFIX)]


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured markdown table (readable as plain text too)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = list(right) if right is not None else [False] * len(headers)

    def line(row: Sequence[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True))
        return "| " + " | ".join(padded) + " |"

    rules = (("-" * (w + 1) + ":") if r else ("-" * (w + 2)) for w, r in zip(widths, right, strict=True))
    rule = "|" + "|".join(rules) + "|"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])
