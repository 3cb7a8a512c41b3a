"""Logit filters: what each decoding step may not sample (Whisper's LogitFilter classes).

Each filter edits a step's logits (n, vocab) in place given the tokens so far;
:func:`~streamwhisper.model.decoding.decode` applies the ones its :class:`DecodeOptions` ask for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .tokenizer import Tokenizer


class LogitFilter(Protocol):
    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        """Edit ``logits`` (n, vocab) in place given the tokens so far (n, T)."""


class SuppressBlank:
    """No blank (space or end of text) as the first sampled token."""

    def __init__(self, tokenizer: Tokenizer, sample_begin: int) -> None:
        self.ids = tokenizer.encode(" ") + [tokenizer.eot]
        self.sample_begin = sample_begin

    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        if tokens.shape[1] == self.sample_begin:
            logits[:, self.ids] = -np.inf


class SuppressTokens:
    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = list(ids)
        self._index: Tensor | None = None  # the ids on the logits' device (a list is 7x slower)

    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        if self._index is None or self._index.device != logits.device:
            self._index = torch.tensor(self.ids, dtype=torch.long, device=logits.device)
        logits.index_fill_(1, self._index, -np.inf)


class ApplyTimestampRules:
    """Whisper's rules: timestamps in pairs, never decreasing, the first one early, and a
    timestamp whenever the timestamps together are likelier than any single text token."""

    def __init__(self, tokenizer: Tokenizer, sample_begin: int, max_initial_timestamp_index: int | None) -> None:
        self.eot = tokenizer.eot
        self.no_timestamps = tokenizer.no_timestamps
        self.ts_begin = tokenizer.timestamp_begin
        self.sample_begin = sample_begin
        self.max_initial = max_initial_timestamp_index

    def apply(self, logits: Tensor, tokens: Tensor) -> None:
        ts_begin = self.ts_begin
        logits[:, self.no_timestamps] = -np.inf
        rows = tokens[:, self.sample_begin :].tolist()
        for k, seq in enumerate(rows):
            last_was_ts = len(seq) >= 1 and seq[-1] >= ts_begin
            penultimate_was_ts = len(seq) < 2 or seq[-2] >= ts_begin
            if last_was_ts:
                if penultimate_was_ts:  # a pair is complete: text must follow
                    logits[k, ts_begin:] = -np.inf
                else:  # a segment just ended: another timestamp or eot
                    logits[k, : self.eot] = -np.inf
            stamps = [t for t in seq if t >= ts_begin]
            if stamps:
                # never decrease; and a segment must have non-zero length
                last = stamps[-1] if last_was_ts and not penultimate_was_ts else stamps[-1] + 1
                logits[k, ts_begin:last] = -np.inf
        if tokens.shape[1] == self.sample_begin:
            logits[:, :ts_begin] = -np.inf
            if self.max_initial is not None:
                logits[:, ts_begin + self.max_initial + 1 :] = -np.inf
        logprobs = F.log_softmax(logits.float(), dim=-1)
        ts_logprob = logprobs[:, ts_begin:].logsumexp(dim=-1)
        max_text = logprobs[:, :ts_begin].amax(dim=-1)  # (max(dim) would also find where: 10x slower)
        for k in torch.nonzero(ts_logprob > max_text).flatten().tolist():
            logits[k, :ts_begin] = -np.inf


def suppress_token_ids(tokenizer: Tokenizer, option: str | tuple[int, ...] | None) -> list[int]:
    """The ids :class:`SuppressTokens` masks: ``option`` (ids; "-1" stands for the non-speech
    symbols) and the special tokens that are never sampled."""
    if option is None:
        ids: list[int] = []
    elif isinstance(option, str):
        ids = [int(t) for t in option.split(",") if t.strip()]
    else:
        ids = list(option)
    if -1 in ids:
        ids = [t for t in ids if t >= 0] + list(tokenizer.non_speech_tokens)
    ids += [
        tokenizer.transcribe,
        tokenizer.translate,
        tokenizer.sot,
        tokenizer.sot_prev,
        tokenizer.sot_lm,
        tokenizer.no_speech,
    ]
    return sorted(set(ids))
