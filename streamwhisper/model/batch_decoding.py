"""Greedy decoding of many windows at once: one decoder forward per token step for every row.

Each row keeps what it would have alone: its own audio window (windows padded to the longest and
masked in cross-attention), its own prompt, prefix and sample budget. The rows' first tokens share
one (B, T) tensor laid out so that every ``<|startoftranscript|>`` falls in one column (its logits
give the no-speech probability) and every row's last token in the last column::

    pad pad <|startofprev|> prompt... <|sot|> pad pad <|notimestamps|> prefix...
    <|startofprev|> prompt... ...     <|sot|> <|notimestamps|> prefix... ...

Explicit positions and an attention mask then make each row see exactly its own tokens, so the
tokens equal :func:`~streamwhisper.model.decoding.decode`'s one window at a time (quantised
logits are computed row by row for that: see ``TextDecoder.forward``'s ``row_logits``). Rows that
finished leave the batch in groups, so that a window that loops to its token budget does not keep
the others' cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from .decoding import (
    DecodeOptions,
    DecodingResult,
    alignment_head_map,
    compression_ratio,
    detect_language,
    initial_tokens,
    loops,
)
from .interrupt import checkpoint
from .kv_cache import KVCache
from .logit_filters import suppress_token_ids
from .token_decoders import row_argmax
from .tokenizer import Task, Tokenizer, get_tokenizer
from .whisper import DecoderBlock, Whisper

Cross = list[tuple[Tensor, Tensor]]  # one window's cross-attention (K, V) per decoder layer, (1, H, S, Dh)


def window_cross(model: Whisper, features: Tensor) -> Cross:
    """The cross-attention K/V of one window's audio features (1, S, n_state)."""
    return [cast(DecoderBlock, block).cross_attn.project_audio(features) for block in model.decoder.blocks]


def window_cache(model: Whisper, cross: Cross, max_tokens: int | None = None) -> KVCache:
    """An empty one-window cache over ``cross`` (as ``model.new_cache`` of its features)."""
    d_head = model.dims.n_text_state // model.dims.n_text_head
    return KVCache.create(cross, model.dims.n_text_head, d_head, max_tokens or model.dims.n_text_ctx)


def batch_cache(model: Whisper, windows: Sequence[Cross], max_tokens: int) -> KVCache:
    """An empty cache over several windows: cross K/V zero-padded to the longest, masked."""
    lengths = [cross[0][0].shape[2] for cross in windows]
    width = max(lengths)
    def pad(layer: int, kv: int) -> Tensor:
        return torch.cat([F.pad(w[layer][kv], (0, 0, 0, width - n)) for w, n in zip(windows, lengths, strict=True)])

    padded = [(pad(layer, 0), pad(layer, 1)) for layer in range(len(windows[0]))]
    d_head = model.dims.n_text_state // model.dims.n_text_head
    cache = KVCache.create(padded, model.dims.n_text_head, d_head, max_tokens)
    if min(lengths) < width:
        frames = torch.arange(width, device=model.device)
        cache.cross_mask = (frames[None, :] < torch.tensor(lengths, device=model.device)[:, None])[:, None, None, :]
    return cache


def _row_tokenizers(
    model: Whisper, tokenizer: Tokenizer, options: Sequence[DecodeOptions], windows: Sequence[Cross]
) -> tuple[list[Tokenizer], list[str], list[dict[str, float] | None]]:
    """Per row: the tokenizer of its language and task, the language, detected probabilities."""
    n = len(options)
    languages = [o.language or tokenizer.language or "en" for o in options]
    probs: list[dict[str, float] | None] = [None] * n
    if not model.is_multilingual:
        return [tokenizer] * n, languages, probs
    if any(o.language is None for o in options):
        detected = detect_language(model, tokenizer, batch_cache(model, windows, 1))
        for i, o in enumerate(options):
            if o.language is None:
                probs[i] = detected[i]
                languages[i] = max(detected[i], key=detected[i].__getitem__)
    tokenizers = [
        get_tokenizer(True, num_languages=model.num_languages, language=lang, task=cast(Task, o.task))
        for lang, o in zip(languages, options, strict=True)
    ]
    return tokenizers, languages, probs


def _layout(firsts: list[list[int]], sots: list[int], pad: int) -> tuple[Tensor, Tensor, Tensor, int]:
    """The rows' first tokens in one (B, T) tensor, each row's sot in one column and its last
    token in the last: (tokens, their positions, which are real (not padding), the sot column)."""
    sot_col = max(sots)
    width = sot_col + 1 + max(len(f) - s - 1 for f, s in zip(firsts, sots, strict=True))
    tokens = torch.full((len(firsts), width), pad, dtype=torch.long)
    positions = torch.zeros((len(firsts), width), dtype=torch.long)
    real = torch.zeros((len(firsts), width), dtype=torch.bool)
    for r, (first, sot) in enumerate(zip(firsts, sots, strict=True)):
        cols = [*range(sot_col - sot, sot_col + 1), *range(width - (len(first) - sot - 1), width)]
        tokens[r, cols] = torch.tensor(first)
        positions[r, cols] = torch.arange(len(first))
        real[r, cols] = True
    return tokens, positions, real, sot_col


@torch.inference_mode()
def decode_greedy_batch(
    model: Whisper,
    tokenizer: Tokenizer,
    windows: Sequence[Cross],
    options: Sequence[DecodeOptions],
    drop_fraction: float = 0.25,
    stop_loops: Sequence[bool] | None = None,
) -> list[DecodingResult]:
    """Greedy (temperature 0) decoding of each window (its :func:`window_cross`) with ``options[i]``.

    Returns one result per window, equal to ``decode(model, tokenizer, features, options[i],
    window_cache(model, windows[i]))[0]``. Rows that finished leave the batch once they are
    ``drop_fraction`` of it (copying the cache of the others costs about one step). A row with
    ``stop_loops[i]`` stops as soon as its tokens :func:`loops`, marked ``looped`` (its result
    then differs from ``decode()``'s, which runs on to the budget).
    """
    for o in options:
        o.validate()
        if o.temperature != 0 or o.beam_size is not None or o.best_of is not None or not o.without_timestamps:
            raise ValueError("batched decoding is greedy at temperature 0 without timestamps only")
    n_rows, n_ctx, eot, device = len(options), model.dims.n_text_ctx, tokenizer.eot, model.device
    sample_lens = [o.sample_len or n_ctx // 2 for o in options]
    tokenizers, languages, language_probs = _row_tokenizers(model, tokenizer, options, windows)

    firsts = [initial_tokens(tok, o, n_ctx, n) for tok, o, n in zip(tokenizers, options, sample_lens, strict=True)]
    sots = [f.index(tok.sot) for f, tok in zip(firsts, tokenizers, strict=True)]
    tokens, positions, real, sot_col = _layout(firsts, sots, eot)
    width = tokens.shape[1]
    # a padding column sees itself only (a row of all-False would give NaN)
    mask = (torch.ones(width, width, dtype=torch.bool).tril() & real[:, None, :]) | torch.eye(width, dtype=torch.bool)

    # SuppressBlank at the first sampled token, SuppressTokens at every one: the ids depend on
    # the model's vocabulary only, not on the language or task
    if len({(o.suppress_blank, o.suppress_tokens) for o in options}) > 1:
        raise ValueError("batched decoding needs the same suppress options in every row")
    blank = tokenizer.encode(" ") + [eot] if options[0].suppress_blank else []
    suppress = suppress_token_ids(tokenizer, options[0].suppress_tokens) if options[0].suppress_tokens else []

    # room for the laid-out first tokens and the longest step budget (positions are explicit, so
    # the cache may be longer than n_ctx)
    cache = batch_cache(model, windows, width + max(sample_lens))
    # the alignment heads' scores of each row from its sot on (see DecodeOptions.alignment_scores)
    heads = alignment_head_map(model) if any(o.alignment_scores for o in options) else None
    logits, qks = model.decoder(
        tokens.to(device), cache, positions=positions.to(device), mask=mask[:, None].to(device),
        select=torch.tensor([sot_col, width - 1]), row_logits=True, heads=heads,
    )
    first_scores: list[Tensor] = []
    fed_scores: list[list[Tensor]] = [[] for _ in range(n_rows)]  # per fed-back token: (heads, S)
    if heads:
        scores = torch.cat(qks, dim=1)
        for r, (first, sot) in enumerate(zip(firsts, sots, strict=True)):
            cols = torch.tensor([sot_col, *range(width - (len(first) - sot - 1), width)])
            first_scores.append(scores[r, :, cols, : windows[r][0][0].shape[2]])
    no_speech = logits[:, 0].softmax(dim=-1)[:, tokenizer.no_speech].tolist()
    logits = logits[:, 1]
    # Budgets as decode() applies them: sample_len tokens, and the context (the first tokens
    # plus those sampled) below n_ctx.
    budget = torch.tensor([min(n, n_ctx - len(f)) for n, f in zip(sample_lens, firsts, strict=True)])
    next_pos = torch.tensor([len(f) for f in firsts])
    batch = torch.arange(n_rows)  # the original row of each batch row
    alive = torch.ones(n_rows, dtype=torch.bool)  # per batch row
    sum_logprobs = torch.zeros(n_rows)  # per original row
    out: list[list[int]] = [[] for _ in range(n_rows)]
    out_logprobs: list[list[float]] = [[] for _ in range(n_rows)]
    watch = list(stop_loops) if stop_loops is not None else [False] * n_rows
    looped = [False] * n_rows
    last = torch.empty(0, dtype=torch.long)
    for step in range(max(sample_lens)):
        checkpoint()
        if step > 0:
            finished = int((~alive).sum())
            if finished and finished >= drop_fraction * len(alive):  # drop finished rows from the batch
                keep = alive.nonzero().flatten()
                cache, real, batch, alive = cache.select(keep.to(device)), real[keep], batch[keep], alive[keep]
                budget, next_pos, last = budget[keep], next_pos[keep], last[keep]
            real = torch.cat([real, torch.ones(len(real), 1, dtype=torch.bool)], dim=1)
            step_mask = real[:, None, None, :].to(device)
            pos = next_pos.clamp(max=n_ctx - 1)[:, None].to(device)  # finished rows may run past n_ctx
            logits, qks = model.decoder(
                last[:, None].to(device), cache, positions=pos, mask=step_mask, row_logits=True, heads=heads
            )
            logits = logits[:, -1]
            if heads:
                scores = torch.cat(qks, dim=1)
                for j in alive.nonzero().flatten().tolist():  # the rows whose text token was fed back
                    r = int(batch[j])
                    fed_scores[r].append(scores[j, :, 0, : windows[r][0][0].shape[2]])
            next_pos += 1
        if blank and step == 0:
            logits[:, blank] = -torch.inf
        if suppress:
            logits[:, suppress] = -torch.inf
        last = row_argmax(logits).cpu()
        logprobs = F.log_softmax(logits.float(), dim=-1).cpu()
        live = batch[alive]
        current = logprobs[alive, last[alive]]
        sum_logprobs[live] += current
        for r, token, lp in zip(live.tolist(), last[alive].tolist(), current.tolist(), strict=True):
            out[r].append(token)
            out_logprobs[r].append(lp)
        alive &= (last != eot) & (step + 1 < budget)
        for j in alive.nonzero().flatten().tolist():
            r = int(batch[j])
            if watch[r] and loops(out[r]):
                alive[j], looped[r] = False, True
        if not alive.any():
            break

    results = []
    for r in range(n_rows):
        chosen = out[r][:-1] if out[r][-1:] == [eot] else out[r]
        text = tokenizers[r].decode(chosen).strip()
        alignment = None
        if heads and options[r].alignment_scores and len(fed_scores[r]) == len(chosen):
            alignment = torch.cat([first_scores[r], *(f[:, None] for f in fed_scores[r])], dim=1)
        results.append(
            DecodingResult(
                tokens=chosen,
                text=text,
                language=languages[r],
                avg_logprob=sum_logprobs[r].item() / (len(chosen) + 1),
                no_speech_prob=no_speech[r],
                temperature=0.0,
                compression_ratio=compression_ratio(text),
                language_probs=language_probs[r],
                token_logprobs=out_logprobs[r][: len(chosen)],
                alignment_scores=alignment,
                looped=looped[r],
            )
        )
    return results
