"""The worker side of benchmarks/offline.py: one engine loaded in its own process, timed on clips.

benchmarks/offline.py runs itself with ``--worker ENGINE`` once per (engine, model, compute type),
ours with the project venv and the peers with the benchmark-only venv, so that each worker's peak
RSS is its engine's alone; the worker prints one JSON row per clip (``_common.emit``).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import _common as common

OURS, FW, OAI = "ours", "faster-whisper", "openai-whisper"
ENGINES = (OURS, FW, OAI)
LANGUAGE = "en"


def _ours(
    model: str, compute: str, model_path: str | None, threads: int
) -> tuple[Callable[[Any], tuple[str, int, int]], dict]:
    import torch

    import streamwhisper
    from streamwhisper.model.cpu_threads import configure_threads
    from streamwhisper.model.decoding import DecodeOptions
    from streamwhisper.model.loading import load_model
    from streamwhisper.transcribe import TranscribeOptions, Transcriber

    configure_threads(threads)  # as `streamwhisper transcribe` runs: torch's threads, numpy's BLAS on one

    transcriber = Transcriber(load_model(model_path or model, "cpu", compute))
    options = TranscribeOptions(decode=DecodeOptions(language=LANGUAGE))  # greedy, fallback, conditioned

    def run(audio: Any) -> tuple[str, int, int]:
        result = transcriber.transcribe(audio, options)
        return result.text, sum(len(s.tokens) for s in result.segments), len(result.segments)

    version = getattr(streamwhisper, "__version__", None) or _dist_version("streamwhisper")
    meta = {"threads": torch.get_num_threads(), "versions": {"streamwhisper": version, "torch": torch.__version__}}
    return run, meta


def _faster_whisper(
    model: str, compute: str, model_path: str | None, threads: int
) -> tuple[Callable[[Any], tuple[str, int, int]], dict]:
    import ctranslate2
    import faster_whisper
    from faster_whisper import WhisperModel

    if not model_path:
        raise SystemExit("faster-whisper worker needs --model-path (a CTranslate2 model directory)")
    fw = WhisperModel(model_path, device="cpu", compute_type=compute, cpu_threads=threads, num_workers=1)

    def run(audio: Any) -> tuple[str, int, int]:
        segments, _ = fw.transcribe(
            audio,
            language=LANGUAGE,
            beam_size=1,  # greedy (its default is a 5-beam search)
            best_of=1,  # one sample per fallback temperature, as ours and openai-whisper's transcribe()
            vad_filter=False,
            word_timestamps=False,
            condition_on_previous_text=True,
            without_timestamps=False,
        )
        segments = list(segments)  # a generator: decoding happens here
        return "".join(s.text for s in segments).strip(), sum(len(s.tokens) for s in segments), len(segments)

    meta = {
        "threads": threads,
        "versions": {"faster-whisper": faster_whisper.__version__, "ctranslate2": ctranslate2.__version__},
    }
    return run, meta


def _openai_whisper(
    model: str, compute: str, model_path: str | None, threads: int
) -> tuple[Callable[[Any], tuple[str, int, int]], dict]:
    import torch

    torch.set_num_threads(threads)
    import whisper

    if compute != "float32":
        raise SystemExit("openai-whisper runs float32 only on the CPU")
    if not model_path:
        raise SystemExit("openai-whisper worker needs --model-path (an OpenAI-format .pt)")
    oai = whisper.load_model(model_path, device="cpu")

    def run(audio: Any) -> tuple[str, int, int]:
        result = whisper.transcribe(
            oai,
            audio,
            language=LANGUAGE,
            fp16=False,
            verbose=None,
            word_timestamps=False,
            condition_on_previous_text=True,
        )
        segments = result["segments"]
        return str(result["text"]).strip(), sum(len(s["tokens"]) for s in segments), len(segments)

    meta = {
        "threads": torch.get_num_threads(),
        "versions": {"openai-whisper": whisper.__version__, "torch": torch.__version__},
    }
    return run, meta


ADAPTERS = {OURS: _ours, FW: _faster_whisper, OAI: _openai_whisper}


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def worker(args: argparse.Namespace) -> int:
    """Load one engine, preload the audio, warm up once, then time ``runs`` transcriptions per clip."""
    clips = []
    for spec in args.audio:
        label, _, path = spec.partition("=")
        clips.append((label, common.load_wav(path, args.seconds)))
    load_s, (run, meta) = common.timed(
        lambda: ADAPTERS[args.worker](args.model, args.compute, args.model_path, args.threads)
    )
    gc.collect()
    rss_after_load = common.current_rss_mb()
    if args.warmup_seconds > 0 and clips:
        run(clips[0][1][: int(args.warmup_seconds * common.SAMPLE_RATE)])
    for label, audio in clips:
        walls: list[float] = []
        tokens: list[int] = []
        texts: list[str] = []
        n_segments = 0
        for _ in range(args.runs):
            gc.collect()
            wall, (text, n_tokens, n_segments) = common.timed(partial(run, audio))
            walls.append(wall)
            tokens.append(n_tokens)
            texts.append(text)
        audio_s = len(audio) / common.SAMPLE_RATE
        wall = common.median(walls)
        common.emit(
            {
                "engine": args.worker,
                "model": args.model,
                "compute": args.compute,
                "audio": label,
                "audio_s": round(audio_s, 3),
                "runs": args.runs,
                "wall_s": [round(w, 4) for w in walls],
                "median_wall_s": round(wall, 4),
                "rtf": round(audio_s / wall, 3),
                "tokens": tokens,
                "tokens_per_s": round(common.median(t / w for t, w in zip(tokens, walls, strict=True)), 2),
                "segments": n_segments,
                "peak_rss_mb": round(common.peak_rss_mb(), 1),
                "load_s": round(load_s, 3),
                "rss_after_load_mb": round(rss_after_load, 1) if rss_after_load is not None else None,
                "threads": meta["threads"],
                "versions": meta["versions"],
                "python": sys.executable,
                "same_text_every_run": len(set(texts)) == 1,
                "text": texts[-1],
            }
        )
    return 0
