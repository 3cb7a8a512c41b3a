"""Scoring transcripts for the benchmarks: the eval manifest, Whisper's English normaliser and word error rate.

Only the benchmarks use it: jiwer and whisper-normalizer are benchmark dependencies
(the ``bench`` extra: ``pip install -e '.[bench]'``), not the package's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jiwer


@dataclass(frozen=True)
class Clip:
    id: str
    wav: Path
    seconds: float
    reference: str
    license: str
    category: str
    lang: str


def read_manifest(path: str | Path, categories: Iterable[str] | None = None) -> list[Clip]:
    """Clips of a tab-separated manifest (no quoting: references may start with a quote)."""
    path = Path(path)
    wanted = set(categories) if categories else None
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    clips = []
    for line in lines[1:]:
        if not line.strip():
            continue
        row = dict(zip(header, line.split("\t"), strict=False))
        if wanted is not None and row["category"] not in wanted:
            continue
        clips.append(
            Clip(
                row["id"],
                path.parent / row["wav"],
                float(row["seconds"]),
                row["reference"],
                row["license"],
                row["category"],
                row["lang"],
            )
        )
    return clips


@lru_cache(maxsize=1)
def _normalizer():  # type: ignore[no-untyped-def]
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def normalize(text: str) -> str:
    """Whisper's English text normaliser (spelling, numbers, punctuation, case)."""
    return " ".join(_normalizer()(text).split())


#: A sentence mark: a full stop, question or exclamation mark ending a word (not "3.5").
SENTENCE_MARK = re.compile(r"[.?!]+(?=[\s\"')\]]|$)")


def normalize_with_marks(text: str) -> str:
    """:func:`normalize`, with each sentence mark kept as the word ".": scored as words, marks
    put where the reference has none (or left out) count as insertions (deletions)."""
    parts = [normalize(part) for part in SENTENCE_MARK.split(text)]
    return " ".join(w for i, part in enumerate(parts) for w in (part, "." if i < len(parts) - 1 else "") if w)


def word_error_rate(
    references: list[str], hypotheses: list[str], normalizer: Callable[[str], str] = normalize
) -> float:
    """Corpus WER after normalisation: total edits over total reference words."""
    pairs = [(normalizer(r), normalizer(h)) for r, h in zip(references, hypotheses, strict=True)]
    pairs = [(r, h) for r, h in pairs if r]
    if not pairs:
        return 0.0
    out = jiwer.process_words([r for r, _ in pairs], [h for _, h in pairs])
    edits = out.substitutions + out.deletions + out.insertions
    return edits / sum(len(r.split()) for r, _ in pairs)


def edit_counts(reference: str, hypothesis: str) -> dict[str, int]:
    """Substitutions, deletions and insertions of one hypothesis, after normalisation."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return {"sub": 0, "del": 0, "ins": len(hyp.split()), "words": 0}
    out = jiwer.process_words(ref, hyp)
    return {"sub": out.substitutions, "del": out.deletions, "ins": out.insertions, "words": len(ref.split())}


def word_count(text: str) -> int:
    return len(normalize(text).split())
