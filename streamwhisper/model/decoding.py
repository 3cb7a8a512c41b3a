"""Whisper's decoding loop over one window's audio features.

:class:`DecodeOptions` (frozen, validated) says what to do; logit filters
(:mod:`~streamwhisper.model.logit_filters`) shape each step's logits; a token decoder
(:mod:`~streamwhisper.model.token_decoders`: greedy or beam search) picks tokens; :func:`decode`
runs the loop with an explicit KV cache and ranks the candidates into a :class:`DecodingResult`.
Retrying at higher temperatures is :mod:`~streamwhisper.model.fallback`'s rule.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from ..whisper_input import TIME_PRECISION
from .interrupt import checkpoint
from .kv_cache import KVCache
from .logit_filters import ApplyTimestampRules, LogitFilter, SuppressBlank, SuppressTokens, suppress_token_ids
from .token_decoders import BeamSearchDecoder, GreedyDecoder, TokenDecoder, rank_by_likelihood
from .tokenizer import Task, Tokenizer, get_tokenizer
from .whisper import Whisper


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
    # Stop a lone sample (no beams, no best_of, one window) once its tokens loop (:func:`loops`),
    # marked ``looped``; Whisper runs on to the budget.
    stop_loops: bool = False

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
    # decoding stopped early because the last tokens repeat a block (:func:`loops`): the
    # text is a loop cut short, so its compression ratio understates it
    looped: bool = False


def compression_ratio(text: str) -> float:
    """How much zlib shrinks the text: repetitive loops compress far better than speech."""
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def loops(tokens: Sequence[int], min_span: int = 12, max_period: int = 24) -> bool:
    """Whether ``tokens`` end in one block of 1 to ``max_period`` tokens said at least three
    times in a row, over at least ``min_span`` tokens: "Go forward 10 meters. Go forward 10
    meters. Go forward 10 meters." (a word said twice, or "no, no, no", is not a loop)."""
    n = len(tokens)
    for period in range(1, min(max_period, n // 3) + 1):
        span = max(3, -(-min_span // period)) * period
        if span <= n and all(tokens[k] == tokens[k - period] for k in range(n - span + period, n)):
            return True
    return False


# ---------------------------------------------------------------- the decoding loop


def kept_prefix(prefix: list[int], n_ctx: int, sample_len: int) -> list[int]:
    """The end of a forced prefix that fits the decoder's budget (what decoding is forced to)."""
    budget = n_ctx // 2 - sample_len
    return prefix[-budget:] if budget > 0 else prefix


def initial_tokens(tokenizer: Tokenizer, options: DecodeOptions, n_ctx: int, sample_len: int) -> list[int]:
    """[<|startofprev|> prompt] sot-sequence [<|notimestamps|>] [prefix]."""
    tokens = list(
        tokenizer.sot_sequence_including_notimestamps if options.without_timestamps else tokenizer.sot_sequence
    )
    if options.prefix:
        prefix = (
            tokenizer.encode(" " + options.prefix.strip()) if isinstance(options.prefix, str) else list(options.prefix)
        )
        tokens += kept_prefix(prefix, n_ctx, sample_len)
    if options.prompt:
        prompt = (
            tokenizer.encode(" " + options.prompt.strip()) if isinstance(options.prompt, str) else list(options.prompt)
        )
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
    return [dict(zip(codes, row, strict=False)) for row in probs]


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

    results: list[tuple[int, DecodingResult]] = []
    # Rows with different detected languages need different sot sequences: decode each language group.
    for language in dict.fromkeys(languages):
        rows = [i for i, lang in enumerate(languages) if lang == language]
        tok = (
            get_tokenizer(True, num_languages=model.num_languages, language=language, task=cast(Task, options.task))
            if model.is_multilingual
            else tokenizer
        )
        sub_cache = cache if len(rows) == n_audio else cache.select(torch.tensor(rows))
        for row, result in zip(
            rows, _decode_group(model, tok, sub_cache, options, n_ctx, sample_len, generator), strict=False
        ):
            result.language = language
            result.language_probs = language_probs[row]
            results.append((row, result))
    results.sort(key=lambda pair: pair[0])
    return [r for _, r in results]


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
        max_initial = (
            None if options.max_initial_timestamp is None else round(options.max_initial_timestamp / TIME_PRECISION)
        )
        filters.append(ApplyTimestampRules(tokenizer, sample_begin, max_initial))

    tokens = torch.tensor([prompt], device=model.device).repeat(n_audio, 1)
    sum_logprobs = torch.zeros(n_audio * n_group)
    heads = alignment_head_map(model) if options.alignment_scores else None
    prompt_scores: Tensor | None = None  # (audio, heads, rows from sot on, S)
    step_scores: list[list[Tensor]] = []  # per step, per layer with alignment heads: (row, heads, 1, S)
    no_speech_probs = [float("nan")] * n_audio
    decoder.reset()
    watch, looped = options.stop_loops and tokens.shape[0] == 1 and n_group == 1, False
    for i in range(sample_len):
        checkpoint()
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
        if watch and loops(tokens[0, sample_begin:].tolist()):
            looped = True
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
                looped=looped,
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


def sampling_seed(mel: np.ndarray, context: Sequence[int]) -> int:
    """A fallback's sampling seed drawn from what its window holds (its log-mel and the tokens
    it is conditioned on): the same window samples the same text whatever was decoded before."""
    crc = zlib.crc32(np.ascontiguousarray(mel, dtype=np.float32).tobytes())
    return zlib.crc32(np.asarray(context, dtype=np.int64).tobytes(), crc)
