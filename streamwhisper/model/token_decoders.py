"""Token decoders: how the next token of every row is picked (greedy or sampled, or beam search).

A :class:`TokenDecoder` extends each row by one token per step, says when all rows are done and
returns the candidates; :func:`rank_by_likelihood` picks the best of them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .kv_cache import KVCache


class TokenDecoder(Protocol):
    def reset(self) -> None: ...

    def update(self, tokens: Tensor, logits: Tensor, sum_logprobs: Tensor, cache: KVCache) -> tuple[Tensor, bool]:
        """Append one token per row; returns (tokens, every row finished)."""

    def finalize(self, tokens: Tensor, sum_logprobs: Tensor) -> tuple[list[list[list[int]]], list[list[float]]]:
        """Candidates per audio: (token lists ending in eot, their summed log-probs)."""

    def token_logprobs(self, audio: int, candidate: int, n: int) -> list[float]:
        """Log-probabilities of the first ``n`` sampled tokens of a candidate from finalize()."""

    def rows(self, audio: int, candidate: int, n: int) -> list[int] | None:
        """The row that fed each of a candidate's first ``n`` tokens back, decoder step by step
        (step k + 1 fed token k), or None when one was never fed back."""


class GreedyDecoder:
    """Argmax at temperature 0, otherwise sampling; ``n_group`` rows per audio (best_of)."""

    def __init__(
        self, temperature: float, eot: int, n_group: int = 1, generator: torch.Generator | None = None
    ) -> None:
        self.temperature, self.eot, self.n_group = temperature, eot, n_group
        self.generator = generator
        self.steps: list[Tensor] = []  # log-prob of each row's sampled token, step by step

    def reset(self) -> None:
        self.steps = []

    def token_logprobs(self, audio: int, candidate: int, n: int) -> list[float]:
        """Log-probabilities (at temperature 1) of the first ``n`` tokens sampled in that row."""
        row = audio * self.n_group + candidate
        return [float(step[row]) for step in self.steps[:n]]

    def rows(self, audio: int, candidate: int, n: int) -> list[int] | None:
        # len(steps) updates: the tokens of the first len(steps) - 1 were fed back
        return [audio * self.n_group + candidate] * n if n < len(self.steps) else None

    def update(self, tokens: Tensor, logits: Tensor, sum_logprobs: Tensor, cache: KVCache) -> tuple[Tensor, bool]:
        if self.temperature == 0:
            next_tokens = row_argmax(logits)
        else:
            probs = F.softmax(logits.float() / self.temperature, dim=-1)
            next_tokens = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
        logprobs = F.log_softmax(logits.float(), dim=-1)
        current = logprobs[torch.arange(logprobs.shape[0]), next_tokens]
        self.steps.append(current)
        finished = tokens[:, -1] == self.eot
        sum_logprobs += current * ~finished
        next_tokens[finished] = self.eot
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=-1)
        return tokens, bool((tokens[:, -1] == self.eot).all())

    def finalize(self, tokens: Tensor, sum_logprobs: Tensor) -> tuple[list[list[list[int]]], list[list[float]]]:
        rows = F.pad(tokens, (0, 1), value=self.eot).tolist()
        scores = sum_logprobs.tolist()
        n = self.n_group
        return [rows[i : i + n] for i in range(0, len(rows), n)], [scores[i : i + n] for i in range(0, len(scores), n)]


def row_argmax(x: Tensor) -> Tensor:
    """``x.argmax(dim=-1)`` for rows (n, vocab), the same indices (the first of equal maxima).

    On a CPU numpy's: a vectorised pass, where torch's CPU argmax compares value by value
    (tiny's 51,864 logits: 12 us a row against 60-140 us on the AVX2 EPYC).
    """
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float16):
        return x.argmax(dim=-1)
    return torch.from_numpy(x.detach().numpy().argmax(axis=-1))


def row_topk(x: Tensor, k: int, block: int = 128) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=-1)`` for rows (n, vocab) as wide as a vocabulary, 3x faster on a CPU.

    A row's k largest values lie in the k blocks of ``block`` columns with the largest maxima,
    and a block maximum is one vectorised pass (``amax``); ``topk`` scans every value. Beam 5
    over tiny's 51,864 tokens: 0.1 ms a step instead of 0.33.
    """
    n, width = x.shape
    if width < 4 * k * block:
        return x.topk(k, dim=-1)
    pad = -width % block
    padded = F.pad(x, (0, pad), value=-torch.inf) if pad else x
    blocks = padded.view(n, -1, block)
    best_blocks = blocks.amax(dim=-1).topk(k, dim=-1).indices  # (n, k)
    candidates = blocks.gather(1, best_blocks[:, :, None].expand(-1, -1, block)).view(n, k * block)
    values, at = candidates.topk(k, dim=-1)
    return values, best_blocks.gather(1, at // block) * block + at % block


class BeamSearchDecoder:
    """Whisper's beam search: keep ``beam_size`` live beams per audio, stop when
    ``round(beam_size * patience)`` candidates have finished."""

    def __init__(self, beam_size: int, eot: int, patience: float | None = None) -> None:
        self.beam_size, self.eot = beam_size, eot
        self.max_candidates = max(1, round(beam_size * (patience or 1.0)))
        self.finished: list[dict[tuple[int, ...], float]] | None = None
        self.row_logprobs: list[list[float]] = []  # each live beam's token log-probs
        self.finished_logprobs: list[dict[tuple[int, ...], list[float]]] = []
        self.sources: list[list[int]] = []  # per update: the row each new row extends
        self.finished_from: list[dict[tuple[int, ...], tuple[int, int]]] = []  # (update, row)

    def reset(self) -> None:
        self.finished = None
        self.row_logprobs, self.finished_logprobs = [], []
        self.sources, self.finished_from = [], []

    def rows(self, audio: int, candidate: int, n: int) -> list[int] | None:
        assert self.finished is not None
        seq = list(self.finished[audio])[candidate]
        if seq not in self.finished_from[audio]:
            return None  # a live beam taken at the end: its last token was never fed back
        update, row = self.finished_from[audio][seq]
        rows = [row]
        for step in range(update - 1, 0, -1):  # the row at step k extends sources[k - 1][it]
            row = self.sources[step][row]
            rows.append(row)
        rows.reverse()
        return rows[:n] if len(rows) >= n else None

    def token_logprobs(self, audio: int, candidate: int, n: int) -> list[float]:
        assert self.finished is not None
        seq = list(self.finished[audio])[candidate]
        return self.finished_logprobs[audio][seq][:n]

    def update(self, tokens: Tensor, logits: Tensor, sum_logprobs: Tensor, cache: KVCache) -> tuple[Tensor, bool]:
        n_audio = tokens.shape[0] // self.beam_size
        if self.finished is None:
            self.finished = [{} for _ in range(n_audio)]
            self.finished_logprobs = [{} for _ in range(n_audio)]
            self.finished_from = [{} for _ in range(n_audio)]
            self.row_logprobs = [[] for _ in range(tokens.shape[0])]
        logprobs = F.log_softmax(logits.float(), dim=-1)
        top_lp, top_ids = row_topk(logprobs, self.beam_size + 1)
        prefixes = tokens.tolist()
        base = sum_logprobs.tolist()
        top_lp_l, top_ids_l = top_lp.tolist(), top_ids.tolist()
        next_tokens: list[list[int]] = []
        sources: list[int] = []
        new_sums: list[float] = []
        new_row_logprobs: list[list[float]] = []
        for i in range(n_audio):
            scores: dict[tuple[int, ...], float] = {}
            origin: dict[tuple[int, ...], tuple[int, float]] = {}  # (source row, token log-prob)
            for j in range(self.beam_size):
                idx = i * self.beam_size + j
                for lp, tok in zip(top_lp_l[idx], top_ids_l[idx], strict=False):
                    seq = tuple(prefixes[idx] + [tok])
                    scores[seq] = base[idx] + lp
                    origin[seq] = (idx, lp)
            saved = 0
            newly_finished: dict[tuple[int, ...], float] = {}
            for seq in sorted(scores, key=scores.__getitem__, reverse=True):
                if seq[-1] == self.eot:
                    newly_finished[seq] = scores[seq]
                else:
                    idx, lp = origin[seq]
                    new_sums.append(scores[seq])
                    next_tokens.append(list(seq))
                    sources.append(idx)
                    new_row_logprobs.append([*self.row_logprobs[idx], lp])
                    saved += 1
                    if saved == self.beam_size:
                        break
            done = self.finished[i]
            for seq in sorted(newly_finished, key=newly_finished.__getitem__, reverse=True):
                if len(done) >= self.max_candidates:
                    break
                done[seq] = newly_finished[seq]
                idx, lp = origin[seq]
                self.finished_logprobs[i][seq] = [*self.row_logprobs[idx], lp]
                self.finished_from[i][seq] = (len(self.sources), idx)
        self.row_logprobs = new_row_logprobs
        self.sources.append(sources)
        sum_logprobs.copy_(torch.tensor(new_sums, dtype=sum_logprobs.dtype))
        cache.reorder(torch.tensor(sources))
        completed = all(len(done) >= self.max_candidates for done in self.finished)
        return torch.tensor(next_tokens, device=tokens.device), completed

    def finalize(self, tokens: Tensor, sum_logprobs: Tensor) -> tuple[list[list[list[int]]], list[list[float]]]:
        assert self.finished is not None
        scores = sum_logprobs.view(-1, self.beam_size).tolist()
        rows = tokens.view(-1, self.beam_size, tokens.shape[-1]).tolist()
        for i, done in enumerate(self.finished):
            if len(done) < self.beam_size:  # not enough finished: take the best live beams
                for j in np.argsort(scores[i])[::-1]:
                    seq = tuple(rows[i][j] + [self.eot])
                    done[seq] = scores[i][j]
                    self.finished_logprobs[i][seq] = self.row_logprobs[i * self.beam_size + j]
                    if len(done) >= self.beam_size:
                        break
        return [[list(s) for s in done] for done in self.finished], [list(done.values()) for done in self.finished]


def rank_by_likelihood(candidates: list[list[int]], sum_logprobs: list[float], length_penalty: float | None) -> int:
    """Index of the best candidate: summed log-prob over length (or Google NMT's penalty)."""

    def score(lp: float, length: int) -> float:
        penalty = length if length_penalty is None else ((5 + length) / 6) ** length_penalty
        return lp / penalty

    return int(np.argmax([score(lp, len(c)) for c, lp in zip(candidates, sum_logprobs, strict=False)]))
