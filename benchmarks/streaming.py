"""Streaming benchmark: WER and latency of the eval categories, streamed through the daemon's driver.

Each clip is replayed by ``streamwhisper.bench.stream_file`` (the daemon's Pump on a simulated
clock, computation-aware by default) and scored against its reference with Whisper's English
normaliser. Prints one JSON object per run. Figures, never asserts.

    .venv/bin/python benchmarks/streaming.py                          # longform, default settings
    .venv/bin/python benchmarks/streaming.py --category read_en --category nonspeech
    .venv/bin/python benchmarks/streaming.py --unaware --step 0.5
    .venv/bin/python benchmarks/streaming.py --category conversation_test   # benchmarks/conversation.py
    .venv/bin/python benchmarks/streaming.py --offline-cache /tmp/offline   # reuse offline transcripts

The offline transcript of a clip (its WER, and the word times latency is measured from) depends
only on the audio, the model and its settings, not on the streaming settings compared:
``--offline-cache`` keeps each one in a directory, keyed by all of them, for the next run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import conversation  # noqa: E402
from benchmarks._common import shared_data_dir  # noqa: E402
from benchmarks.scoring import (  # noqa: E402
    SENTENCE_MARK,
    Clip,
    edit_counts,
    normalize,
    normalize_with_marks,
    read_manifest,
    word_error_rate,
)


class CachedTranscriber:
    """A transcriber whose results are kept in ``directory``, keyed by the audio and ``setting``."""

    def __init__(self, transcriber: Any, directory: Path, setting: str) -> None:
        self._transcriber, self._directory, self._setting = transcriber, directory, setting
        directory.mkdir(parents=True, exist_ok=True)

    def transcribe(self, audio: Any, options: Any) -> Any:
        key = hashlib.sha256(audio.tobytes() + repr((self._setting, options)).encode()).hexdigest()[:32]
        path = self._directory / f"{key}.pickle"
        if path.exists():
            return pickle.loads(path.read_bytes())
        result = self._transcriber.transcribe(audio, options)
        path.write_bytes(pickle.dumps(result))
        return result


def word_key(word: str) -> str:
    return normalize(word) or word.strip().lower()


# the figures repeated for each category when a run has several (issue 22 reports hard apart)
BY_CATEGORY = ("wer", "offline_wer", "stream_edits", "offline_edits", "final_latency_p50", "final_latency_p95", "rtf")


def summarize(clips: list[Clip], runs: list[Any]) -> dict[str, Any]:
    from streamwhisper.bench import latency_summary, rtf

    pairs = list(zip(clips, runs, strict=True))
    speech = [(c, r) for c, r in pairs if c.category != "nonspeech"]
    nonspeech = [(c, r) for c, r in pairs if c.category == "nonspeech"]
    out: dict[str, Any] = {
        "clips": len(runs),
        "audio_seconds": round(sum(c.seconds for c in clips), 2),
        "wer": None,
        "offline_wer": None,
    }
    if speech:
        refs = [c.reference for c, _ in speech]
        out["wer"] = round(word_error_rate(refs, [r.stream_text for _, r in speech]), 4)
        out["offline_wer"] = round(word_error_rate(refs, [r.offline_text for _, r in speech]), 4)
        # sentence punctuation scored as words (a mark at every breath costs an insertion each)
        for name, text in (("", lambda r: r.stream_text), ("offline_", lambda r: r.offline_text)):
            texts = [text(r) for _, r in speech]
            out[f"{name}wer_with_marks"] = round(word_error_rate(refs, texts, normalize_with_marks), 4)
            out[f"{name}sentence_marks"] = sum(len(SENTENCE_MARK.findall(t)) for t in texts)
        out["reference_sentence_marks"] = sum(len(SENTENCE_MARK.findall(r)) for r in refs)
        # where streaming loses to offline: edits of each, summed over the clips
        for name, text in (("stream", lambda r: r.stream_text), ("offline", lambda r: r.offline_text)):
            counts = [edit_counts(c.reference, text(r)) for c, r in speech]
            out[f"{name}_edits"] = {k: sum(c[k] for c in counts) for k in ("sub", "del", "ins")}
    out.update(latency_summary([r for _, r in speech]))
    out["rtf"] = rtf(runs)
    if nonspeech:
        words = sum(len(normalize(r.stream_text).split()) for _, r in nonspeech)
        seconds = sum(c.seconds for c, _ in nonspeech)
        out["nonspeech_words"] = words
        out["nonspeech_words_per_10min"] = round(words * 600 / seconds, 3)
        if speech:  # non-speech costs far fewer requests: "rtf" alone would flatter the speech
            out["speech_rtf"] = rtf([r for _, r in speech])
            out["nonspeech_rtf"] = rtf([r for _, r in nonspeech])
    categories = list(dict.fromkeys(c.category for c in clips))
    if len(categories) > 1:
        out["by_category"] = {}
        for category in categories:
            mine = [i for i, c in enumerate(clips) if c.category == category]
            part = summarize([clips[i] for i in mine], [runs[i] for i in mine])
            out["by_category"][category] = {k: part[k] for k in BY_CATEGORY if k in part}
    return out


class SimulatedTimer:
    """A clock on which every recognition takes ``cost`` seconds: the replay reads it once before
    and once after each request."""

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return (self.calls // 2) * self.cost


def main(argv: list[str] | None = None) -> int:
    from streamwhisper.audio.files import load_audio
    from streamwhisper.bench import machine_summary, stream_file
    from streamwhisper.cli import _add_model_flags, load_configured_model, resolve_config
    from streamwhisper.model.serving import WhisperRecognizer
    from streamwhisper.streaming.streamer import Streamer
    from streamwhisper.transcribe import Transcriber

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, help="an eval manifest.tsv (default: the shared evaluation set)")
    parser.add_argument("--category", action="append", help="manifest categories (repeatable; default longform)")
    parser.add_argument("--limit", type=int, help="at most this many clips per category")
    parser.add_argument("--unaware", action="store_true", help="computation-unaware: compute takes no time")
    parser.add_argument(
        "--simulated-compute", type=float, metavar="S",
        help="each recognition takes S seconds on the simulated clock instead of its measured time "
        "(deterministic: for comparing settings on a busy machine; latency figures then model that cost)",
    )
    parser.add_argument("--step", type=float, help="seconds of new audio between recognitions")
    parser.add_argument("--transcripts", action="store_true", help="print each clip's streamed and offline text")
    parser.add_argument("--offline-cache", type=Path, metavar="DIR", help="keep offline transcripts here for reuse")
    parser.add_argument(
        "--late", type=float, metavar="S", help="list each word whose final came more than S seconds after its audio"
    )
    _add_model_flags(parser)
    args = parser.parse_args(argv)

    manifest = args.manifest or shared_data_dir() / "eval" / "manifest.tsv"
    clips: list[Clip] = []
    for category in args.category or ["longform"]:
        source = conversation.build(manifest) if category in conversation.CATEGORIES else manifest
        found = read_manifest(source, [category])
        clips += found[: args.limit] if args.limit else found
    if not clips:
        parser.error(f"no clips of {args.category or ['longform']} in {manifest}")
    config = resolve_config(args)
    streaming = config.streaming if args.step is None else replace(config.streaming, min_step_s=args.step)
    model = load_configured_model(config)
    recognizer = WhisperRecognizer(model, config.recognizer)
    transcriber: Any = Transcriber(model)
    if args.offline_cache:
        transcriber = CachedTranscriber(transcriber, args.offline_cache, repr((config.model, config.recognizer)))
    runs = []
    for clip in clips:
        run = stream_file(
            load_audio(clip.wav), lambda: Streamer(streaming), recognizer, transcriber,
            aware=not args.unaware, word_key=word_key,
            timer=time.perf_counter if args.simulated_compute is None else SimulatedTimer(args.simulated_compute),
        )
        runs.append(run)
        edits = edit_counts(clip.reference, run.stream_text) if clip.category != "nonspeech" else {}
        offline = edit_counts(clip.reference, run.offline_text) if clip.category != "nonspeech" else {}
        print(
            f"{clip.id}: {clip.seconds:.1f}s, compute {run.compute_s:.1f}s, {run.final_words} words; "
            f"stream {edits} offline {offline}",
            file=sys.stderr,
        )
        for word, end, final_at in run.final_times if args.late is not None else ():
            if final_at - end > args.late:
                late = f"{final_at - end:5.2f} s: {word.strip()!r} (audio to {end:.2f} s, final at {final_at:.2f} s)"
                print(f"  late {late}", file=sys.stderr)
        if args.transcripts:
            print(f"  stream : {run.stream_text}\n  offline: {run.offline_text}", file=sys.stderr)
    summary = {
        "mode": "computation-unaware" if args.unaware else "computation-aware",
        "simulated_compute_s": args.simulated_compute,
        "categories": args.category or ["longform"],
        **summarize(clips, runs),
        **machine_summary(model, config.model.name, config.model.compute_type),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
