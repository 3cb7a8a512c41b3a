"""``offline.py --wer CATEGORY``: every engine's word error rate and speed over whole categories of the
evaluation set, in the same run as its speed on the long clips.

A clip of a scored category is labelled ``category/id``; its rows are summed per category
(corpus WER after Whisper's English normaliser, audio seconds over median wall seconds) instead
of printed one table per clip.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from benchmarks import _common as common
from benchmarks.scoring import read_manifest, word_error_rate


def scored_audio(manifest: Path, categories: list[str]) -> tuple[list[tuple[str, Path]], dict[str, str]]:
    """The clips of ``categories`` as (label, path), and each label's reference transcript."""
    audio: list[tuple[str, Path]] = []
    references: dict[str, str] = {}
    for category in categories:
        clips = read_manifest(manifest, [category])
        if not clips:
            raise SystemExit(f"no clips of category {category!r} in {manifest}")
        for clip in clips:
            label = f"{category}/{clip.id}"
            audio.append((label, clip.wav))
            references[label] = clip.reference
    return audio, references


def accuracy_report(rows: list[dict], references: dict[str, str]) -> str:
    """One table per category: each (engine, model, compute)'s WER and speed over its clips."""
    grouped: dict[str, dict[tuple[str, str, str], list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["audio"] in references and "text" in r:
            grouped[r["audio"].split("/", 1)[0]][(r["engine"], r["model"], r["compute"])].append(r)
    lines: list[str] = []
    headers = ["engine", "model", "compute", "clips", "WER %", "RTF (x real time)"]
    for category, runs in grouped.items():
        body = []
        for (engine, model, compute), mine in runs.items():
            wer = word_error_rate([references[r["audio"]] for r in mine], [r["text"] for r in mine])
            speed = sum(r["audio_s"] for r in mine) / sum(r["median_wall_s"] for r in mine)
            body.append([engine, model, compute, len(mine), common.fmt(100 * wer, 2), common.fmt(speed, 1)])
        lines += [f"accuracy over {category}", "", common.table(headers, body, [False] * 3 + [True] * 3), ""]
    return "\n".join(lines)
