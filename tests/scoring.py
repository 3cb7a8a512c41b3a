"""Scoring a streamed transcript when the client's part is under test, not the model's.

The streaming core sometimes repeats a phrase in its finals ("ask not what your country can do
for you. Ask not what your country can do for you."): a fault of the streaming core that a client
(the browser page, the meeting bot, ``listen``'s capture path) can neither cause nor fix, and that
makes a plain WER bound flaky (seen in about 1 run in 6). These checks judge what the client must
guarantee: every word of the clip arrives (few deletions
and substitutions) and no audio arrives twice (the text is not much longer than the reference).
"""

from __future__ import annotations

import jiwer

from benchmarks.scoring import normalize


def missed_words(reference: str, hypothesis: str) -> float:
    """Reference words lost or misheard (substitutions + deletions) per reference word."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    out = jiwer.process_words(ref, hyp)
    return (out.substitutions + out.deletions) / len(ref.split())


def assert_delivered(reference: str, hypothesis: str, bound: float = 0.2) -> None:
    """At most ``bound`` of the reference missed, and under 1.75x its length (audio sent twice: 2x)."""
    missed = missed_words(reference, hypothesis)
    assert missed <= bound, f"{missed:.2f} of the reference words missed: {hypothesis!r}"
    words, ref_words = len(normalize(hypothesis).split()), len(normalize(reference).split())
    assert words < 1.75 * ref_words, f"{words} words for a reference of {ref_words}: {hypothesis!r}"
