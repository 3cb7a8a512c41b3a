"""Whisper's decoding as small composed pieces.

:class:`DecodeOptions` (frozen, validated) says what to do; logit filters (:class:`SuppressBlank`,
:class:`SuppressTokens`, :class:`ApplyTimestampRules`) shape each step's logits; a token decoder
(:class:`GreedyDecoder` or :class:`BeamSearchDecoder`) picks tokens; :func:`decode` runs the loop
over one window's audio features with an explicit KV cache and ranks the candidates.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError
from .kv_cache import KVCache
from .tokenizer import Tokenizer, get_tokenizer
from .whisper import Whisper

TIME_PRECISION = 0.02  # seconds per timestamp token


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode one 30 s window (Whisper's DecodingOptions)."""

    task: str = "transcribe"
    language: str | None = None
    temperature: float = 0.0
    sample_len: int | None = None  # maximum number of tokens to sample
    best_of: int | None = None  # independent samples when temperature > 0
    beam_size: int | None = None  # beams when temperature == 0
    patience: float | None = None
    length_penalty: float | None = None
    prompt: str | tuple[int, ...] | None = None  # previous text, after <|startofprev|>
    prefix: str | tuple[int, ...] | None = None  # forced start of the current text
    suppress_tokens: str | tuple[int, ...] | None = "-1"
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: float | None = 1.0
    # Keep the alignment heads' cross-attention scores of the chosen tokens (and of the sot
    # sequence and prefix before them): word timings then need no decoder pass of their own.
    alignment_scores: bool = False

    def validate(self) -> DecodeOptions:
        if self.task not in ("transcribe", "translate"):
            raise ConfigError(f"task must be 'transcribe' or 'translate', not {self.task!r}")
        if self.temperature < 0:
            raise ConfigError("temperature must be >= 0")
        if self.beam_size is not None and self.best_of is not None:
            raise ConfigError("beam_size and best_of can't be given together")
        if self.temperature == 0 and self.best_of is not None:
            raise ConfigError("best_of with greedy sampling (temperature 0) is not compatible")
        if self.beam_size is not None and self.beam_size < 1:
            raise ConfigError("beam_size must be at least 1")
        if self.patience is not None and self.beam_size is None:
            raise ConfigError("patience requires beam_size to be given")
        if self.patience is not None and self.patience <= 0:
            raise ConfigError("patience must be positive")
        if self.length_penalty is not None and not 0 <= self.length_penalty <= 1:
            raise ConfigError("length_penalty (alpha) should be a value between 0 and 1")
        return self


@dataclass
class DecodingResult:
    tokens: list[int]  # sampled text and timestamp tokens, without sot sequence and eot
    text: str
    language: str
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    language_probs: dict[str, float] | None = None
    token_logprobs: list[float] = field(default_factory=list)
    # With DecodeOptions.alignment_scores: (alignment heads, rows, audio frames) for the rows from
    # <|startoftranscript|> to the last text token (none for <|endoftext|>); None when a token
    # was never fed back (decoding stopped at sample_len).
    alignment_scores: Tensor | None = None


def compression_ratio(text: str) -> float:
    """How much zlib shrinks the text: repetitive loops compress far better than speech."""
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


# ---------------------------------------------------------------- logit filters


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
        max_text = logprobs[:, :ts_begin].max(dim=-1).values
        for k in torch.nonzero(ts_logprob > max_text).flatten().tolist():
            logits[k, :ts_begin] = -np.inf


# ---------------------------------------------------------------- token decoders


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

    def __init__(self, temperature: float, eot: int, n_group: int = 1, generator: torch.Generator | None = None) -> None:
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
            next_tokens = logits.argmax(dim=-1)
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
                for lp, tok in zip(top_lp_l[idx], top_ids_l[idx]):
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

    return int(np.argmax([score(lp, len(c)) for c, lp in zip(candidates, sum_logprobs)]))


# ---------------------------------------------------------------- the decoding loop


def suppress_token_ids(tokenizer: Tokenizer, option: str | tuple[int, ...] | None) -> list[int]:
    if option is None:
        ids: list[int] = []
    elif isinstance(option, str):
        ids = [int(t) for t in option.split(",") if t.strip()]
    else:
        ids = list(option)
    if -1 in ids:
        ids = [t for t in ids if t >= 0] + list(tokenizer.non_speech_tokens)
    ids += [tokenizer.transcribe, tokenizer.translate, tokenizer.sot, tokenizer.sot_prev, tokenizer.sot_lm, tokenizer.no_speech]
    return sorted(set(ids))


def kept_prefix(prefix: list[int], n_ctx: int, sample_len: int) -> list[int]:
    """The end of a forced prefix that fits the decoder's budget (what decoding is forced to)."""
    budget = n_ctx // 2 - sample_len
    return prefix[-budget:] if budget > 0 else prefix


def initial_tokens(tokenizer: Tokenizer, options: DecodeOptions, n_ctx: int, sample_len: int) -> list[int]:
    """[<|startofprev|> prompt] sot-sequence [<|notimestamps|>] [prefix]."""
    tokens = list(tokenizer.sot_sequence_including_notimestamps if options.without_timestamps else tokenizer.sot_sequence)
    if options.prefix:
        prefix = tokenizer.encode(" " + options.prefix.strip()) if isinstance(options.prefix, str) else list(options.prefix)
        tokens += kept_prefix(prefix, n_ctx, sample_len)
    if options.prompt:
        prompt = tokenizer.encode(" " + options.prompt.strip()) if isinstance(options.prompt, str) else list(options.prompt)
        tokens = [tokenizer.sot_prev] + prompt[-(n_ctx // 2 - 1) :] + tokens
    return tokens


@torch.inference_mode()
def detect_language(model: Whisper, tokenizer: Tokenizer, cache: KVCache) -> list[dict[str, float]]:
    """Language probabilities per audio row, from the logits after <|startoftranscript|>."""
    n = cache.batch_size
    start = cache.length
    logits, _ = model.decoder(torch.full((n, 1), tokenizer.sot, device=model.device), cache)
    cache.trim(start)
    logits = logits[:, 0]
    lang_ids = list(tokenizer.all_language_tokens)
    probs = logits[:, lang_ids].softmax(dim=-1).tolist()
    codes = list(tokenizer.all_language_codes)
    return [dict(zip(codes, row)) for row in probs]


@torch.inference_mode()
def decode(
    model: Whisper,
    tokenizer: Tokenizer,
    audio_features: Tensor,
    options: DecodeOptions,
    cache: KVCache | None = None,
    generator: torch.Generator | None = None,
) -> list[DecodingResult]:
    """Decode each row of ``audio_features`` (B, S, n_state) with the same options.

    ``cache`` may hold the windows' cross-attention K/V already (it is reset to empty first);
    ``generator`` seeds sampling at temperature > 0 (reproducible fallbacks).
    """
    options.validate()
    n_audio = audio_features.shape[0]
    n_ctx = model.dims.n_text_ctx
    sample_len = options.sample_len or n_ctx // 2
    if cache is None:
        cache = model.new_cache(audio_features)
    cache.trim(0)

    languages = [options.language or tokenizer.language or "en"] * n_audio
    language_probs: list[dict[str, float] | None] = [None] * n_audio
    if model.is_multilingual and options.language is None:
        probs = detect_language(model, tokenizer, cache)
        languages = [max(p, key=p.__getitem__) for p in probs]
        language_probs = list(probs)

    results: list[DecodingResult] = []
    # Rows with different detected languages need different sot sequences: decode each language group.
    for language in dict.fromkeys(languages):
        rows = [i for i, lang in enumerate(languages) if lang == language]
        tok = (
            get_tokenizer(True, num_languages=model.num_languages, language=language, task=options.task)
            if model.is_multilingual
            else tokenizer
        )
        sub_cache = cache if len(rows) == n_audio else cache.select(torch.tensor(rows))
        for row, result in zip(rows, _decode_group(model, tok, sub_cache, options, n_ctx, sample_len, generator)):
            result.language = language
            result.language_probs = language_probs[row]
            results.append((row, result))  # type: ignore[arg-type]
    results.sort(key=lambda pair: pair[0])  # type: ignore[index]
    return [r for _, r in results]  # type: ignore[misc]


def _decode_group(
    model: Whisper,
    tokenizer: Tokenizer,
    cache: KVCache,
    options: DecodeOptions,
    n_ctx: int,
    sample_len: int,
    generator: torch.Generator | None = None,
) -> list[DecodingResult]:
    n_audio = cache.batch_size
    prompt = initial_tokens(tokenizer, options, n_ctx, sample_len)
    sample_begin = len(prompt)
    sot_index = prompt.index(tokenizer.sot)
    if options.temperature == 0 and options.beam_size:
        n_group = options.beam_size
        decoder: TokenDecoder = BeamSearchDecoder(options.beam_size, tokenizer.eot, options.patience)
    else:
        n_group = options.best_of or 1
        decoder = GreedyDecoder(options.temperature, tokenizer.eot, n_group, generator)
    filters: list[LogitFilter] = []
    if options.suppress_blank:
        filters.append(SuppressBlank(tokenizer, sample_begin))
    if options.suppress_tokens:
        filters.append(SuppressTokens(suppress_token_ids(tokenizer, options.suppress_tokens)))
    if not options.without_timestamps:
        max_initial = None if options.max_initial_timestamp is None else round(options.max_initial_timestamp / TIME_PRECISION)
        filters.append(ApplyTimestampRules(tokenizer, sample_begin, max_initial))

    tokens = torch.tensor([prompt], device=model.device).repeat(n_audio, 1)
    sum_logprobs = torch.zeros(n_audio * n_group)
    heads = alignment_head_map(model) if options.alignment_scores else None
    prompt_scores: Tensor | None = None  # (audio, heads, rows from sot on, S)
    step_scores: list[list[Tensor]] = []  # per step, per layer with alignment heads: (row, heads, 1, S)
    no_speech_probs = [float("nan")] * n_audio
    decoder.reset()
    for i in range(sample_len):
        if i == 0:
            # the prompt once per window; its beams (or samples) branch from the cache after it
            select = torch.tensor([sot_index, sample_begin - 1])
            logits, qks = model.decoder(tokens, cache, select=select, heads=heads)
            if heads:
                prompt_scores = torch.cat(qks, dim=1)[:, :, sot_index:]
            no_speech_probs = logits[:, 0].softmax(dim=-1)[:, tokenizer.no_speech].tolist()
            logits = logits[:, 1]
            if n_group > 1:
                # room for the tokens the loop below may add, not the whole context
                cache = cache.repeat(n_group, max_len=min(cache.max_len, cache.length + sample_len + 1))
                tokens = tokens.repeat_interleave(n_group, dim=0)
                logits = logits.repeat_interleave(n_group, dim=0)
        else:
            logits, qks = model.decoder(tokens[:, -1:], cache, heads=heads)
            logits = logits[:, -1]
            if heads:
                step_scores.append(qks)  # joined for the chosen rows only, at the end
        for logit_filter in filters:
            logit_filter.apply(logits, tokens)
        tokens, completed = decoder.update(tokens, logits, sum_logprobs, cache)
        if completed or tokens.shape[-1] > n_ctx or cache.length + 1 >= cache.max_len:
            break

    candidates, scores = decoder.finalize(tokens, sum_logprobs)
    results = []
    for i in range(n_audio):
        texts = [_strip_eot(c[sample_begin:], tokenizer.eot) for c in candidates[i]]
        best = rank_by_likelihood(texts, scores[i], options.length_penalty)
        chosen = texts[best]
        text = tokenizer.decode(chosen).strip()
        token_logprobs = decoder.token_logprobs(i, best, len(chosen))
        alignment = None
        if prompt_scores is not None and (rows := decoder.rows(i, best, len(chosen))) is not None:
            fed = [torch.cat([layer[row] for layer in step_scores[k]]) for k, row in enumerate(rows)]  # (heads, 1, S)
            alignment = torch.cat([prompt_scores[i], *fed], dim=1)
        results.append(
            DecodingResult(
                tokens=chosen,
                text=text,
                language=tokenizer.language or "en",
                avg_logprob=scores[i][best] / (len(chosen) + 1),
                no_speech_prob=no_speech_probs[i],
                temperature=options.temperature,
                compression_ratio=compression_ratio(text),
                token_logprobs=token_logprobs,
                alignment_scores=alignment,
            )
        )
    return results


def alignment_head_map(model: Whisper) -> dict[int, list[int]]:
    """{decoder layer: its alignment heads}, in the order of ``alignment_heads.nonzero()``."""
    heads: dict[int, list[int]] = {}
    for layer, head in cast(Tensor, model.alignment_heads).nonzero().tolist():
        heads.setdefault(layer, []).append(head)
    return heads


def _strip_eot(tokens: list[int], eot: int) -> list[int]:
    return tokens[: tokens.index(eot)] if eot in tokens else tokens


def with_temperature(options: DecodeOptions, temperature: float) -> DecodeOptions:
    """Options for one fallback attempt: beams at temperature 0, best_of samples above it."""
    if temperature > 0:
        return replace(options, temperature=temperature, beam_size=None, patience=None)
    return replace(options, temperature=0.0, best_of=None)
