"""Test doubles shared by the streaming tests: scripted VADs, recognisers, synthetic speech,
and the settings and event summary the screening and agreement tests share.

Both recognisers honour a request's forced prefix the way the real one does: the prefix
holds the committed words still inside the window, and the hypothesis holds only the words
heard after them. Like the real one, they encode the request's text themselves
(:meth:`RecognitionRequest.with_tokens`), each word to exactly one token, so the prefix length
is the number of committed words; each fake checks that those words are the ones it hears at
the start of the window (the Streamer must never send a prefix that does not match the audio).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamwhisper.audio.mel import mel_filters
from streamwhisper.events import Event, Final, Partial
from streamwhisper.model.fallback import FallbackRule
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord, RecognitionRequest
from streamwhisper.streaming.committed import CLAUSE_END_PUNCTUATION
from streamwhisper.streaming.config import PolicyConfig
from streamwhisper.streaming.streamer import Streamer

SR = 16_000

# The agreement mechanics alone: any window may commit, a word only needs to end two of
# Whisper's 20 ms steps before its window's end (the defaults are stricter; see their tests),
# and only agreement commits: every word, even one the model is sure of, needs two hypotheses
# (sure_hypotheses 2), and no stall_commit_s.
AGREEMENT = PolicyConfig(commit_margin_s=0.04, min_commit_window_s=0.0, stall_commit_s=0.0, sure_hypotheses=2)

# --- hypotheses on the absolute clock ----------------------------------------------------------

Said = tuple[str, float, float]  # a word with its absolute start and end (seconds)


def hyp(
    words: Sequence[Said], offset: float = 0.0, *, probabilities: Sequence[float] | None = None, **kw: Any
) -> Hypothesis:
    """A hypothesis whose words are given on the absolute clock of a window at ``offset``, each
    at probability 0.9 unless ``probabilities`` gives them."""
    ps = [0.9] * len(words) if probabilities is None else probabilities
    ws = tuple(
        HypothesisWord(w, round(s - offset, 3), round(e - offset, 3), p) for (w, s, e), p in zip(words, ps, strict=True)
    )
    fields: dict[str, Any] = dict(avg_logprob=-0.2, no_speech_prob=0.01, compression_ratio=1.2, language="en")
    fields.update(kw)
    decoded = Hypothesis("".join(w.word for w in ws), (), ws, **fields)
    # the verdicts the real recogniser's fallback rule puts on what it decoded
    rule = FallbackRule()
    return dataclasses.replace(decoded, silent=rule.is_silence(decoded), looping=rule.is_loop(decoded))


def texts(events: Sequence[Event]) -> list[tuple[str, str]]:
    """(type, text) of the partials and finals among the events."""
    return [(type(e).__name__, e.text) for e in events if isinstance(e, (Partial, Final))]


def fake_encode(text: str) -> list[int]:
    """One "token" per word: its length."""
    return [len(w) for w in text.split()]


class ScriptedRecognizer:
    """Returns pre-scripted hypotheses in order, words given on the absolute clock.

    The script describes what the speaker said and when; each window hears the words that
    overlap it (cut at its end), as a model would. With a forced prefix of n tokens (n
    committed words, see :func:`fake_encode`) the first n words heard are the prefix and only
    the rest is returned.
    """

    def __init__(self, streamer: Streamer, script: list[dict[str, Any]]) -> None:
        self.streamer = streamer
        self.script = list(script)
        self.log: list[dict[str, Any]] = []

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        window = self.streamer.outstanding
        assert window is not None and len(requests) == 1 and self.script, "unexpected request"
        request = requests[0].with_tokens(fake_encode)
        step = self.script.pop(0)
        words = [(w, s, min(e, window.end)) for w, s, e in step["words"] if s < window.end and e > window.start]
        n = len(request.prefix)
        heard = fake_encode("".join(w for w, _, _ in words[:n]))
        heard[-1:] = fake_encode(words[n - 1][0].rstrip(CLAUSE_END_PUNCTUATION)) if n else []  # the bare end
        assert heard == list(request.prefix), f"prefix {request.prefix} is not the start of the window: {words}"
        self.log.append(
            {
                "start": window.start,
                "end": window.end,
                "endpoint": window.endpoint,
                "prompt": list(request.prompt),
                "prefix": list(request.prefix),
            }
        )
        return [hyp(words[n:], window.start, **step.get("hyp", {}))]


class SpanVad:
    """Voiced in the given [start, end) second spans; 30 ms frames."""

    frame_samples = 480

    def __init__(self, spans: Sequence[tuple[float, float]]) -> None:
        self.spans = spans
        self.pos = 0

    def classify(self, frames: np.ndarray) -> list[bool]:
        out = []
        for _ in range(frames.shape[0]):
            t = self.pos / SR
            out.append(any(a <= t < b for a, b in self.spans))
            self.pos += self.frame_samples
        return out


# --- tone-coded speech -------------------------------------------------------------------------

LABEL_BINS = np.arange(8, 80, 3)  # 24 well separated mel bins, one per word label
FFT_FREQS = np.linspace(0, SR / 2, 201)
LABEL_FREQS = FFT_FREQS[mel_filters(80)[LABEL_BINS].argmax(axis=1)]


@dataclass(frozen=True)
class Spoken:
    label: int
    start: float
    end: float


def synth(seconds: float, seed: int, continuous: tuple[float, float] = (0.0, 0.0)) -> tuple[np.ndarray, list[Spoken]]:
    """Tone-burst "speech": words of 0.2-0.5 s, short gaps, sometimes a pause of 0.8-2 s.

    Inside ``continuous`` there is no pause long enough for a VAD endpoint. Labels are random
    (neighbours differ, no pair repeats at once) and no run of 5 labels occurs twice, so the
    policy's prompt-copy and boundary guards never mistake speech for a copy of committed text.
    """
    rng = np.random.default_rng(seed)
    labels = np.random.default_rng([seed, 1])  # a separate stream: timings do not depend on it
    audio = np.zeros(int(seconds * SR), dtype=np.float32)
    words: list[Spoken] = []
    t = 0.5
    while t < seconds - 3.0:
        dur = float(rng.uniform(0.2, 0.5))
        label = int(labels.integers(len(LABEL_BINS)))
        # neighbours differ, and no pair follows itself (A B A B): words repeating the last
        # committed ones right after them are dropped as the decoder's own repeat, by design
        while (words and label == words[-1].label) or (
            len(words) >= 3 and words[-3].label == words[-1].label and label == words[-2].label
        ):
            label = int(labels.integers(len(LABEL_BINS)))
        a, b = round(t * SR), round((t + dur) * SR)
        n = np.arange(b - a)
        fade = np.minimum(1.0, np.minimum(n, b - a - n) / 160)
        audio[a:b] = 0.3 * fade * np.sin(2 * np.pi * LABEL_FREQS[label] * n / SR)
        words.append(Spoken(label, a / SR, b / SR))
        t += dur
        pause = rng.random() < 0.15 and not continuous[0] <= t < continuous[1]
        t += float(rng.uniform(0.8, 2.0) if pause else rng.uniform(0.08, 0.2))
    seq = [w.label for w in words]
    grams = [tuple(seq[i : i + 5]) for i in range(len(seq) - 4)]
    assert len(set(grams)) == len(grams), "synthetic speech repeats a 5-word run: pick another seed"
    return audio, words


def label_of(word: str) -> int:
    return int(word.strip().rstrip(CLAUSE_END_PUNCTUATION)[1:].rstrip("ab"))


def tone_encode(text: str) -> list[int]:
    """One "token" per word " w<label>": its label."""
    return [label_of(w) for w in text.split()]


class EnergyVad:
    """A scripted VAD: a 30 ms frame is voiced when its RMS exceeds -40 dBFS."""

    frame_samples = 480

    def classify(self, frames: np.ndarray) -> list[bool]:
        return (np.sqrt((frames.astype(np.float64) ** 2).mean(axis=1)) > 0.01).tolist()


class ToneRecognizer:
    """Finds the tone bursts in the request's mel and names each by its frequency.

    Times come from the mel frames alone (window-relative), so they check the window offsets
    the Streamer applies. ``unstable`` makes consecutive hypotheses never agree (each word gets
    a suffix that alternates between calls), which forces commits by the window limit.
    A request's text is encoded with :func:`tone_encode` (``requests`` keeps the encoded
    requests); a forced prefix of n tokens must name the first n bursts heard, which are then
    left out of the hypothesis.
    """

    def __init__(self, unstable: bool = False) -> None:
        self.unstable = unstable
        self.requests: list[RecognitionRequest] = []

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        return [self._hear(r.with_tokens(tone_encode)) for r in requests]

    def _hear(self, request: RecognitionRequest) -> Hypothesis:
        self.requests.append(request)
        mel = request.mel
        active = mel.max(axis=0) > mel.max() - 0.75  # within 3 decades of the loudest frame
        edges = np.flatnonzero(np.diff(np.concatenate([[0], active.astype(np.int8), [0]])))
        suffix = "ab"[len(self.requests) % 2] if self.unstable else ""
        words = []
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            label = int(np.abs(LABEL_BINS - mel[:, a:b].mean(axis=1).argmax()).argmin())
            words.append(HypothesisWord(f" w{label}{suffix}", a / 100, b / 100, 0.9))
        n = len(request.prefix)
        heard = [label_of(w.word) for w in words[:n]]
        assert heard == list(request.prefix), f"prefix {request.prefix} is not the start of the window: {heard}"
        words = words[n:]
        text = "".join(w.word for w in words)
        return Hypothesis(text, (), tuple(words), -0.2, 0.01, 1.2, "en")
