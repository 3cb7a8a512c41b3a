"""Word timestamps from the alignment heads' cross-attention, aligned to the text by DTW.

One decoder pass over ``sot-sequence <|notimestamps|> text <|endoftext|>`` records the
cross-attention scores of the alignment heads; normalised, median-filtered and averaged, they form
a token x audio-frame cost matrix whose cheapest monotonic path (dynamic time warping) gives each
token the audio frames it attends to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..whisper_input import FRAMES_PER_SECOND
from .kv_cache import KVCache
from .tokenizer import Tokenizer
from .whisper import Whisper

TOKENS_PER_SECOND = FRAMES_PER_SECOND // 2  # audio tokens are 20 ms
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float
    mark_probability: float = 1.0  # of the closing punctuation merged into the word (1.0: none)


# Knuth's 16-comparator sorting network for 7 values (Whisper's filter width), in 6 layers.
SORT7 = (
    ((0, 6), (2, 3), (4, 5)),
    ((0, 2), (1, 4), (3, 6)),
    ((0, 1), (2, 5), (3, 4)),
    ((1, 2), (4, 6)),
    ((2, 3), (4, 5)),
    ((1, 2), (3, 4), (5, 6)),
)


def median_filter(x: Tensor, width: int) -> Tensor:
    """Median over the last dimension with reflect padding (width odd).

    Width 7 runs a sorting network over 7 shifted views (element-wise min and max): the same
    values as sorting every window, 8x faster (8 heads x 30 tokens x 250 frames: 0.36 ms).
    """
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = F.pad(x[None], (pad, pad, 0, 0), mode="reflect")[0]
    if width != 7:
        return padded.unfold(-1, width, 1).sort()[0][..., pad]
    n = x.shape[-1]
    values = [padded[..., i : i + n] for i in range(width)]
    for layer in SORT7:
        for a, b in layer:
            values[a], values[b] = torch.minimum(values[a], values[b]), torch.maximum(values[a], values[b])
    return values[pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cheapest monotonic path through ``cost`` (N, M) -> (row indices, column indices).

    With the reference's tie-breaking (diagonal, then up, then left: a tie between diagonal
    and up goes left). One row at a time: along a row, acc[j] = cost[j] + min(a[j], acc[j-1])
    (``a``: the better of diagonal and up) unrolls to a running minimum over prefix sums, so a
    row is a few array operations (30 x 300 costs: 0.6 ms, against 9.6 ms one anti-diagonal
    at a time). Sums taken in another order round differently in the last bit, which can move
    the path between two equally cheap ones, never to a dearer one.
    """
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf, dtype=np.float64)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        diagonal, up = acc[i - 1, :-1], acc[i - 1, 1:]
        better = np.where(diagonal < up, diagonal, np.where(up < diagonal, up, np.inf))
        row = cost[i - 1].astype(np.float64)
        total = np.cumsum(row)
        acc[i, 1:] = total + np.minimum.accumulate(better - (total - row))
        trace[i, 1:] = np.where(better < acc[i, :-1], np.where(diagonal < up, 0, 1), 2)
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    result = np.array(path[::-1])
    return result[:, 0], result[:, 1]


@torch.inference_mode()
def find_alignment(
    model: Whisper,
    tokenizer: Tokenizer,
    text_tokens: list[int],
    cache: KVCache,
    num_frames: int,
    medfilt_width: int = 7,
    qk_scale: float = 1.0,
    token_probs: Sequence[float] | None = None,
    scores: Tensor | None = None,
) -> list[WordTiming]:
    """Per-word timings (seconds from the window start) of ``text_tokens`` in one window.

    ``cache`` holds the window's cross-attention K/V (one row); it is reset and reused.
    ``token_probs``: the tokens' probabilities when known (from decoding them); the pass then
    skips the logits and the decoder blocks after the last alignment head. Otherwise they are
    the alignment pass's own, as the reference computes them.
    ``scores``: the alignment heads' scores (heads, rows, S) kept by the pass that decoded the
    tokens (``DecodeOptions.alignment_scores``: rows from the sot sequence to the last text
    token, after the prompt that pass saw); with ``token_probs``, no decoder pass runs here.
    """
    if not text_tokens:
        return []
    tokens = [*tokenizer.sot_sequence, tokenizer.no_timestamps, *text_tokens, tokenizer.eot]
    n_sot = len(tokenizer.sot_sequence)
    probs_known = token_probs is not None and len(token_probs) == len(text_tokens)
    if scores is not None and probs_known and scores.shape[1] == len(tokens) - 1:
        weights, text_token_probs = scores, list(token_probs or ())
    else:
        known = token_probs if probs_known else None
        weights, text_token_probs = _alignment_pass(model, tokenizer, tokens, cache, known)
    weights = weights[:, :, : num_frames // 2]
    weights = (weights * qk_scale).softmax(dim=-1)
    # torch.std_mean over the middle dimension is 20x slower than these passes (1 ms a window)
    mean = weights.mean(dim=-2, keepdim=True)
    std = (weights - mean).square().mean(dim=-2, keepdim=True).sqrt()
    weights = median_filter((weights - mean) / std, medfilt_width)
    matrix = weights.mean(dim=0)[n_sot : len(tokens) - 1]  # the rows predicting a text token or eot
    text_indices, time_indices = dtw(-matrix.double().numpy())

    words, word_tokens = tokenizer.split_to_word_tokens(text_tokens + [tokenizer.eot])
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    word_probs = [float(np.mean(text_token_probs[i:j])) for i, j in pairwise(boundaries)]
    return [
        WordTiming(word, toks, float(start), float(end), prob)
        for word, toks, start, end, prob in zip(words, word_tokens, starts, ends, word_probs, strict=False)
    ]


def _alignment_pass(
    model: Whisper, tokenizer: Tokenizer, tokens: list[int], cache: KVCache, token_probs: Sequence[float] | None
) -> tuple[Tensor, list[float]]:
    """One decoder pass over ``tokens``: the alignment heads' scores (heads, T, S) and the text
    tokens' probabilities (``token_probs`` when given: then no logits)."""
    heads = cast(Tensor, model.alignment_heads).nonzero().tolist()
    n_sot = len(tokenizer.sot_sequence)
    text_tokens = tokens[n_sot + 1 : -1]
    batch = torch.tensor([tokens], device=model.device)
    cache.trim(0)
    if token_probs is not None:
        scores = model.decoder.cross_attention_scores(batch, cache, {layer for layer, _ in heads})
        text_token_probs = list(token_probs)
    else:
        logits, qks = model.decoder(batch, cache, want_qk=True)
        scores = dict(enumerate(qks))
        probs = logits[0, n_sot : n_sot + len(text_tokens), : tokenizer.eot].softmax(dim=-1)
        text_token_probs = probs[torch.arange(len(text_tokens)), torch.tensor(text_tokens)].tolist()
    cache.trim(0)
    return torch.stack([scores[layer][0, head] for layer, head in heads]), text_token_probs


def merge_punctuations(
    alignment: list[WordTiming], prepended: str = PREPEND_PUNCTUATIONS, appended: str = APPEND_PUNCTUATIONS
) -> None:
    """Attach opening punctuation to the next word and closing punctuation to the previous one."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        previous, following = alignment[i], alignment[j]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            following.word = previous.word + following.word
            following.tokens = previous.tokens + following.tokens
            previous.word, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        previous, following = alignment[i], alignment[j]
        if not previous.word.endswith(" ") and following.word in appended:
            previous.word = previous.word + following.word
            previous.tokens = previous.tokens + following.tokens
            previous.mark_probability = following.probability
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1


def clamp_long_words(alignment: list[WordTiming]) -> float:
    """Shorten words at sentence ends that last over twice the median; returns the median."""
    durations = np.array([t.end - t.start for t in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    longest = median * 2
    if len(durations):
        for i in range(1, len(alignment)):
            if alignment[i].end - alignment[i].start > longest:
                if alignment[i].word in SENTENCE_END_MARKS:
                    alignment[i].end = alignment[i].start + longest
                elif alignment[i - 1].word in SENTENCE_END_MARKS:
                    alignment[i].start = alignment[i].end - longest
    return median
