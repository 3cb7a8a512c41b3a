"""``streamwhisper bench``: replay audio through the Streamer with the real model and measure it.

Computation-aware (the default): audio arrives at real time on a simulated clock that advances by
the measured compute time of every recognition, so a slow model falls behind exactly as it would
live (whisper_streaming's simulation). ``--unaware``: compute takes no time (a virtual clock).

Latency of a word: when it first appeared (partial) or became final, minus the end of its audio.
Word end times come from the offline transcript's word timestamps (same model), matched to the
streamed words by sequence alignment; an unmatched word uses its own streamed end time.
"""

from __future__ import annotations

import argparse
import difflib
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .events import Final, Partial
from .evaluation import Clip, normalize, read_manifest, word_error_rate

CHUNK_S = 0.1  # audio arrives in 100 ms blocks, as a capture callback or a WebSocket client sends it


@dataclass
class ClipRun:
    clip: Clip
    stream_text: str = ""
    offline_text: str = ""
    compute_s: float = 0.0
    final_latency: list[float] = field(default_factory=list)
    partial_latency: list[float] = field(default_factory=list)
    revisions: int = 0
    final_words: int = 0


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _word_key(word: str) -> str:
    return normalize(word) or word.strip().lower()


def replay(streamer: Any, recognizer: Any, audio: np.ndarray, aware: bool, chunk_s: float = CHUNK_S) -> tuple[list[tuple[float, Any]], float]:
    """Feed ``audio`` in real-time blocks; returns ([(emit time, event)], total compute seconds)."""
    rate = 16_000
    block = int(chunk_s * rate)
    n_blocks = -(-len(audio) // block)
    clock = 0.0
    fed = 0
    compute = 0.0
    timeline: list[tuple[float, Any]] = []
    flushed = False
    while True:
        # unaware: one block at a time, each served at once; aware: what has arrived by now
        arrived = min(n_blocks, fed + 1) if not aware else min(n_blocks, int(clock / chunk_s + 1e-9))
        while fed < arrived:
            fed += 1
            now = fed * chunk_s if not aware else clock
            timeline += [(now, e) for e in streamer.feed(audio[(fed - 1) * block : fed * block])]
        if fed == n_blocks and not flushed:
            flushed = True
            timeline += [(max(clock, len(audio) / rate), e) for e in streamer.flush()]
        request = streamer.pending_request()
        if request is not None:
            t0 = time.perf_counter()
            hypothesis = recognizer.recognize([request])[0]
            spent = time.perf_counter() - t0
            compute += spent
            if aware:
                clock += spent
            done_at = clock if aware else fed * chunk_s
            timeline += [(done_at, e) for e in streamer.complete(hypothesis)]
            continue
        if flushed:
            break
        clock = max(clock, (fed + 1) * chunk_s) if aware else clock
    return timeline, compute


def score_latency(run: ClipRun, timeline: list[tuple[float, Any]], offline_words: list[tuple[str, float]]) -> None:
    """Fill the run's latencies and revisions from the event timeline."""
    finals: list[tuple[str, float, float]] = []  # (word, audio end, time it became final)
    snapshots: list[tuple[float, list[str]]] = []  # (time, every word shown: committed + partial)
    committed: list[str] = []
    shown_before: list[str] = []
    for at, event in timeline:
        if isinstance(event, Final):
            for w in event.words:
                finals.append((w.word, w.end, at))
                committed.append(_word_key(w.word))
            shown = list(committed)
        elif isinstance(event, Partial):
            shown = committed + [_word_key(w.word) for w in event.words]
        else:
            continue
        # a revision: a word on screen changed in place (not just more words appended)
        run.revisions += sum(1 for a, b in zip(shown_before, shown) if a != b)
        shown_before = shown
        snapshots.append((at, shown))
    run.final_words = len(finals)
    stream_keys = [_word_key(w) for w, _, _ in finals]
    offline_keys = [_word_key(w) for w, _ in offline_words]
    audio_end = [end for _, end, _ in finals]
    matcher = difflib.SequenceMatcher(a=stream_keys, b=offline_keys, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            audio_end[block.a + k] = offline_words[block.b + k][1]
    for i, ((_, _, final_at), end) in enumerate(zip(finals, audio_end)):
        run.final_latency.append(max(0.0, final_at - end))
        first = next((at for at, shown in snapshots if len(shown) > i and shown[i] == stream_keys[i]), final_at)
        run.partial_latency.append(max(0.0, min(first, final_at) - end))


def run_bench(
    clips: list[Clip],
    make_streamer: Callable[[], Any],
    recognizer: Any,
    transcriber: Any,
    aware: bool,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from .audio.files import load_audio
    from .transcribe import TranscribeOptions

    runs: list[ClipRun] = []
    for clip in clips:
        audio = load_audio(clip.wav)
        run = ClipRun(clip)
        offline = transcriber.transcribe(audio, TranscribeOptions(word_timestamps=True))
        run.offline_text = offline.text
        offline_words = [(w.word, w.end) for s in offline.segments for w in (s.words or [])]
        timeline, run.compute_s = replay(make_streamer(), recognizer, audio, aware)
        run.stream_text = " ".join(e.text for _, e in timeline if isinstance(e, Final))
        score_latency(run, timeline, offline_words)
        runs.append(run)
        if progress:
            progress(f"{clip.id}: {clip.seconds:.1f}s, compute {run.compute_s:.1f}s, {run.final_words} words")
    return summarize(runs, aware)


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
    """Median milliseconds to encode one 30 s window: how fast this machine is for the model.

    Streaming figures scale with it (a request every step encodes a full window), so a run's
    figures are comparable with another machine's only alongside it.
    """
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


def _rtf(runs: list[ClipRun]) -> float | None:
    """Compute seconds per second of audio."""
    seconds = sum(r.clip.seconds for r in runs)
    return round(sum(r.compute_s for r in runs) / seconds, 4) if seconds else None


def summarize(runs: list[ClipRun], aware: bool) -> dict[str, Any]:
    speech = [r for r in runs if r.clip.category != "nonspeech"]
    nonspeech = [r for r in runs if r.clip.category == "nonspeech"]
    final_lat = [x for r in speech for x in r.final_latency]
    partial_lat = [x for r in speech for x in r.partial_latency]
    audio_seconds = sum(r.clip.seconds for r in runs)
    out: dict[str, Any] = {
        "mode": "computation-aware" if aware else "computation-unaware",
        "clips": len(runs),
        "audio_seconds": round(audio_seconds, 2),
        "wer": round(word_error_rate([r.clip.reference for r in speech], [r.stream_text for r in speech]), 4) if speech else None,
        "offline_wer": round(word_error_rate([r.clip.reference for r in speech], [r.offline_text for r in speech]), 4) if speech else None,
        "final_latency_p50": _percentile(final_lat, 50),
        "final_latency_p95": _percentile(final_lat, 95),
        "partial_latency_p50": _percentile(partial_lat, 50),
        "partial_latency_p95": _percentile(partial_lat, 95),
        "revision_rate": round(sum(r.revisions for r in speech) / max(1, sum(r.final_words for r in speech)), 4),
        "rtf": _rtf(runs),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if nonspeech:
        words = sum(len(normalize(r.stream_text).split()) for r in nonspeech)
        seconds = sum(r.clip.seconds for r in nonspeech)
        out["nonspeech_words"] = words
        out["nonspeech_words_per_10min"] = round(words * 600 / seconds, 3)
        if speech:  # non-speech costs far fewer requests: "rtf" alone would flatter the speech
            out["speech_rtf"] = _rtf(speech)
            out["nonspeech_rtf"] = _rtf(nonspeech)
    for key in ("final_latency_p50", "final_latency_p95", "partial_latency_p50", "partial_latency_p95"):
        if out[key] is not None:
            out[key] = round(out[key], 3)
    return out


def add_bench_parser(sub: Any, add_model_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    b = sub.add_parser("bench", help="replay audio through the streaming pipeline and measure latency and WER")
    b.add_argument("files", nargs="*", metavar="FILE", help="audio files (no reference: WER against offline)")
    add_model_flags(b)
    b.add_argument("--manifest", type=Path, help="an eval manifest.tsv")
    b.add_argument("--category", action="append", help="manifest categories (repeatable; default longform)")
    b.add_argument("--limit", type=int, help="at most this many clips per category")
    b.add_argument("--unaware", action="store_true", help="computation-unaware: compute takes no time")
    b.add_argument("--step", type=float, help="seconds of new audio between recognitions")
    b.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_bench(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .cli import load_configured_model, resolve_config
    from .errors import ConfigError
    from .evaluation import Clip
    from .model.serving import WhisperRecognizer
    from .transcribe import Transcriber
    from .streaming.streamer import Streamer

    config = resolve_config(args)
    clips: list[Clip] = []
    if args.manifest:
        if not args.manifest.is_file():
            raise ConfigError(f"{args.manifest}: no such manifest")
        categories = args.category or ["longform"]
        for category in categories:
            found = read_manifest(args.manifest, [category])
            clips += found[: args.limit] if args.limit else found
    for f in args.files:
        if not Path(f).is_file():
            raise ConfigError(f"{f}: no such file")
        clips.append(Clip(Path(f).stem, Path(f), 0.0, "", "", "file", "en"))
    if not clips:
        raise ConfigError("nothing to replay: give audio files or --manifest")
    streaming = config.streaming if args.step is None else replace(config.streaming, min_step_s=args.step)
    model = load_configured_model(config)
    recognizer = WhisperRecognizer(model, config.recognizer)
    transcriber = Transcriber(model)
    if any(c.seconds == 0.0 for c in clips):  # plain files: the offline transcript is the reference
        from .audio.files import load_audio

        clips = [
            c if c.seconds else replace(c, seconds=len(a := load_audio(c.wav)) / 16000, reference=transcriber.transcribe(a).text)
            for c in clips
        ]

    def make_streamer() -> Streamer:
        return Streamer(streaming, encode_text=recognizer.encode_text)

    log = None if args.json else (lambda line: print(line, file=sys.stderr))
    summary = run_bench(clips, make_streamer, recognizer, transcriber, aware=not args.unaware, progress=log)
    summary["model"] = config.model.name
    summary["compute_type"] = config.model.compute_type
    summary["cpu"] = cpu_name()
    summary["encoder_ms"] = encoder_ms(model)
    # what "default" (mixed) chose on this CPU, timed at load: the figures depend on it
    summary["encoder_dtype"] = str(model.encoder.autocast_dtype or model.dtype).removeprefix("torch.")
    if args.json:
        print(json.dumps(summary))
    else:
        width = max(len(k) for k in summary)
        for key, value in summary.items():
            print(f"{key:<{width}}  {value}")
    return 0
