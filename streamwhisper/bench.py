"""``streamwhisper bench``: how fast streaming runs on this machine, through the daemon's driver.

Each file is replayed through a :class:`~streamwhisper.streaming.streamer.Streamer` by the
synchronous driver (:func:`streamwhisper.runtime.replay.replay`: the daemon's :class:`Pump`, a
simulated clock), computation-aware by default: compute time delays the transcript as it would
live. The figures: real-time factor, final and partial latency, and the CPU with the time it
takes to encode one 30 s window (streaming figures are comparable across machines only with it).

Latency of a word: when it first appeared (partial) or became final, minus the end of its audio.
Word end times come from the offline transcript's word timestamps (same model), matched to the
streamed words by sequence alignment; an unmatched word, or one matched to an offline word more
than ``MATCH_WITHIN_S`` away from its own streamed end time, uses that streamed time.

TTFS (time to final segment), what a voice agent measures: each file is one turn, which the
client ends as an agent does when its own VAD has heard ``client_stop_s`` (0.2 s, Pipecat's stop)
of silence after the last voiced frame: it sends ``finalize`` there and streams silence on. TTFS
is the time from that finalize to the final that answers it.

Word error rates against reference transcripts are the benchmarks' business
(``benchmarks/streaming.py`` builds on this module).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .events import Event, Final, Partial
from .runtime.replay import replay
from .whisper_input import SAMPLE_RATE

WordKey = Callable[[str], str]
CLIENT_STOP_S = 0.2  # a voice agent's VAD stop: the silence after which it sends finalize
# The alignment pairs equal words; a short matching block can pair a streamed word with the same
# word said seconds away ("I" streamed at 53.5 s, the offline "I" at 38.7 s: 16 s of latency
# for a word the stream did not delay). Real pairs of the two transcripts lie within a second.
MATCH_WITHIN_S = 1.5


def plain_word(word: str) -> str:
    """A word for matching: lower case, letters and digits only."""
    return "".join(re.findall(r"\w+", word.lower())) or word.strip().lower()


@dataclass
class StreamRun:
    """One file streamed: its transcripts and what it cost."""

    seconds: float
    stream_text: str = ""
    offline_text: str = ""
    compute_s: float = 0.0
    final_latency: list[float] = field(default_factory=list)
    partial_latency: list[float] = field(default_factory=list)
    revisions: int = 0
    final_words: int = 0
    final_times: list[tuple[str, float, float]] = field(default_factory=list)  # (word, audio end, final at)
    ttfs: float | None = None


def score_latency(
    run: StreamRun,
    timeline: Sequence[tuple[float, Event]],
    offline_words: Sequence[tuple[str, float]],
    word_key: WordKey = plain_word,
) -> None:
    """Fill the run's latencies and revisions from the event timeline."""
    finals: list[tuple[str, float, float]] = []  # (word, audio end, time it became final)
    snapshots: list[tuple[float, list[str]]] = []  # (time, every word shown: committed + partial)
    committed: list[str] = []
    shown_before: list[str] = []
    for at, event in timeline:
        if isinstance(event, Final):
            for w in event.words:
                finals.append((w.word, w.end, at))
                committed.append(word_key(w.word))
            shown = list(committed)
        elif isinstance(event, Partial):
            shown = committed + [word_key(w.word) for w in event.words]
        else:
            continue
        # a revision: a word on screen changed in place (not just more words appended)
        run.revisions += sum(1 for a, b in zip(shown_before, shown, strict=False) if a != b)
        shown_before = shown
        snapshots.append((at, shown))
    run.final_words = len(finals)
    stream_keys = [word_key(w) for w, _, _ in finals]
    offline_keys = [word_key(w) for w, _ in offline_words]
    audio_end = [end for _, end, _ in finals]
    matcher = difflib.SequenceMatcher(a=stream_keys, b=offline_keys, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            offline_end = offline_words[block.b + k][1]
            if abs(offline_end - audio_end[block.a + k]) <= MATCH_WITHIN_S:
                audio_end[block.a + k] = offline_end
    for i, ((word, _, final_at), end) in enumerate(zip(finals, audio_end, strict=True)):
        run.final_latency.append(max(0.0, final_at - end))
        run.final_times.append((word, end, final_at))
        first = next((at for at, shown in snapshots if len(shown) > i and shown[i] == stream_keys[i]), final_at)
        run.partial_latency.append(max(0.0, min(first, final_at) - end))


def stream_file(
    audio: np.ndarray,
    make_streamer: Callable[[], Any],
    recognizer: Any,
    transcriber: Any,
    *,
    aware: bool = True,
    word_key: WordKey = plain_word,
    timer: Callable[[], float] = time.perf_counter,
    client_stop_s: float | None = CLIENT_STOP_S,
) -> StreamRun:
    """Transcribe ``audio`` offline (for word times), then stream it and score the stream;
    the client finalises ``client_stop_s`` after the last voiced frame (None: it sends no finalize)."""
    from .transcribe import TranscribeOptions

    run = StreamRun(len(audio) / SAMPLE_RATE)
    offline = transcriber.transcribe(audio, TranscribeOptions(word_timestamps=True))
    run.offline_text = offline.text
    offline_words = [(w.word, w.end) for s in offline.segments for w in (s.words or [])]
    finalize_at = None
    if client_stop_s is not None:
        finalize_at = last_voiced_end(audio) + client_stop_s
        missing = int(finalize_at * SAMPLE_RATE) - len(audio)
        if missing > 0:  # the client streams silence until its VAD stops
            audio = np.concatenate([audio, np.zeros(missing, np.float32)])
    result = replay(make_streamer(), recognizer, audio, aware=aware, timer=timer, finalize_at=finalize_at)
    run.compute_s = result.compute_s
    run.ttfs = result.ttfs
    run.stream_text = " ".join(e.text for e in result.events if isinstance(e, Final))
    score_latency(run, result.timeline, offline_words, word_key)
    return run


def last_voiced_end(audio: np.ndarray) -> float:
    """Seconds to the end of the last frame webrtcvad (default settings) calls voiced."""
    from .audio.vad import SpeechDetector, VadConfig, WebRtcVad

    config = VadConfig()
    detector = SpeechDetector(WebRtcVad.from_config(config), config)
    detector.feed(audio)
    return detector.last_voiced_end / SAMPLE_RATE


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def rtf(runs: Sequence[StreamRun]) -> float | None:
    """Compute seconds per second of audio."""
    seconds = sum(r.seconds for r in runs)
    return round(sum(r.compute_s for r in runs) / seconds, 4) if seconds else None


def latency_summary(runs: Sequence[StreamRun]) -> dict[str, Any]:
    """Latency percentiles, revision rate and real-time factor of the runs together."""
    final_lat = [x for r in runs for x in r.final_latency]
    partial_lat = [x for r in runs for x in r.partial_latency]
    ttfs = [r.ttfs for r in runs if r.ttfs is not None]
    return {
        "ttfs_p50": _percentile(ttfs, 50),
        "ttfs_p95": _percentile(ttfs, 95),
        "final_latency_p50": _percentile(final_lat, 50),
        "final_latency_p95": _percentile(final_lat, 95),
        "partial_latency_p50": _percentile(partial_lat, 50),
        "partial_latency_p95": _percentile(partial_lat, 95),
        "revision_rate": round(sum(r.revisions for r in runs) / max(1, sum(r.final_words for r in runs)), 4),
        "rtf": rtf(runs),
    }


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what the platform module reports."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def encoder_ms(model: Any, runs: int = 5) -> float:
    """Median milliseconds to encode one 30 s window: how fast this machine is for the model."""
    import torch

    mel = torch.zeros(1, model.dims.n_mels, 3000, device=model.device)
    times = []
    with torch.inference_mode():
        for i in range(runs + 1):
            t0 = time.perf_counter()
            model.encoder(mel.to(model.dtype))
            if i:  # the first call warms up
                times.append((time.perf_counter() - t0) * 1000)
    return round(float(np.median(times)), 1)


def machine_summary(model: Any, model_name: str, compute_type: str) -> dict[str, Any]:
    """The model, the CPU, how fast it encodes, and the peak memory of this process."""
    from .model.int8 import has_int8_linears

    return {
        "model": model_name,
        "compute_type": compute_type,
        "cpu": cpu_name(),
        "encoder_ms": encoder_ms(model),
        # what "default" (mixed) chose on this CPU, timed at load: the figures depend on it
        "encoder_dtype": "int8"
        if has_int8_linears(model.encoder)
        else str(model.encoder.autocast_dtype or model.dtype).removeprefix("torch."),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def add_bench_parser(sub: Any, add_model_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    b = sub.add_parser("bench", help="stream audio files through the pipeline and measure speed and latency")
    b.add_argument("files", nargs="+", metavar="FILE", help="audio files")
    add_model_flags(b)
    b.add_argument("--unaware", action="store_true", help="computation-unaware: compute takes no time")
    b.add_argument("--step", type=float, help="seconds of new audio between recognitions")
    b.add_argument("--json", action="store_true", help="print one JSON object")


def run_bench(args: argparse.Namespace, config: Any, model: Any) -> int:
    """``streamwhisper bench FILE...`` with the resolved config and the loaded model."""
    from dataclasses import replace

    from .audio.files import load_audio
    from .errors import ConfigError
    from .model.serving import WhisperRecognizer
    from .streaming.streamer import Streamer
    from .transcribe import Transcriber

    for f in args.files:
        if not Path(f).is_file():
            raise ConfigError(f"{f}: no such file")
    streaming = config.streaming if args.step is None else replace(config.streaming, min_step_s=args.step)
    recognizer = WhisperRecognizer(model, config.recognizer)
    transcriber = Transcriber(model)
    runs = []
    for f in args.files:
        run = stream_file(load_audio(f), lambda: Streamer(streaming), recognizer, transcriber, aware=not args.unaware)
        runs.append(run)
        if not args.json:
            line = f"{Path(f).name}: {run.seconds:.1f} s, compute {run.compute_s:.1f} s, {run.final_words} words"
            print(line, file=sys.stderr)
    summary = {
        "mode": "computation-unaware" if args.unaware else "computation-aware",
        "files": len(runs),
        "audio_seconds": round(sum(r.seconds for r in runs), 2),
        **latency_summary(runs),
        **machine_summary(model, config.model.name, config.model.compute_type),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        width = max(len(k) for k in summary)
        for key, value in summary.items():
            print(f"{key:<{width}}  {value}")
    return 0
