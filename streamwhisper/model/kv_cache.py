"""An explicit key/value cache for the text decoder (no forward hooks).

Self-attention keys/values live in preallocated (B, n_head, max_len, d_head) tensors filled in
place; cross-attention keys/values are computed once per audio window and shared by every token
(and, for beam search, expanded without copying when rows share a window).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    cross_k: list[Tensor]  # per layer (B, H, S, Dh)
    cross_v: list[Tensor]
    self_k: list[Tensor]  # per layer (B, H, max_len, Dh)
    self_v: list[Tensor]
    length: int = 0  # tokens already cached (the same for every row)
    pending: int = 0  # tokens written by the current forward pass, committed by advance()
    # (B, 1, 1, S) bool, True on real audio frames: rows whose windows are shorter than S
    # (padded to batch them) must not attend to the padding. None: every frame is real.
    cross_mask: Tensor | None = None

    @classmethod
    def create(cls, cross: list[tuple[Tensor, Tensor]], n_head: int, d_head: int, max_len: int) -> KVCache:
        k0 = cross[0][0]
        batch = k0.shape[0]
        shape = (batch, n_head, max_len, d_head)
        self_k = [torch.empty(shape, dtype=k0.dtype, device=k0.device) for _ in cross]
        self_v = [torch.empty(shape, dtype=k0.dtype, device=k0.device) for _ in cross]
        return cls([k for k, _ in cross], [v for _, v in cross], self_k, self_v)

    @property
    def batch_size(self) -> int:
        return self.self_k[0].shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.self_k[0].dtype

    @property
    def max_len(self) -> int:
        return self.self_k[0].shape[2]

    def cross(self, layer: int) -> tuple[Tensor, Tensor]:
        return self.cross_k[layer], self.cross_v[layer]

    def extend_self(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write this pass's k/v (B, H, T, Dh) after the cached ones; return all (B, H, len+T, Dh)."""
        start, n = self.length, k.shape[2]
        end = start + n
        if end > self.max_len:
            raise ValueError(f"decoder context overflow: {end} > {self.max_len} tokens")
        self.self_k[layer][:, :, start:end] = k
        self.self_v[layer][:, :, start:end] = v
        self.pending = n
        return self.self_k[layer][:, :, :end], self.self_v[layer][:, :, :end]

    def advance(self, n: int) -> None:
        self.length += n
        self.pending = 0

    def trim(self, length: int) -> None:
        """Forget every cached token from ``length`` on (keep a prefix)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot trim a cache of {self.length} tokens to {length}")
        self.length = length

    def reorder(self, rows: Tensor) -> None:
        """Keep/duplicate batch rows (beam search): row i becomes old row ``rows[i]``."""
        if torch.equal(rows, torch.arange(len(rows), device=rows.device)):
            return  # every beam extends itself (about one step in eight)
        n = self.length
        for layer in range(len(self.self_k)):
            self.self_k[layer][:, :, :n] = self.self_k[layer][rows, :, :n]
            self.self_v[layer][:, :, :n] = self.self_v[layer][rows, :, :n]

    def repeat(self, n: int, max_len: int | None = None) -> KVCache:
        """A cache whose rows are each of these rows repeated n times (beams of one window).

        The self-attention K/V are copied (each beam writes its own), into room for
        ``max_len`` tokens (default: as much as this cache has); a single window's
        cross-attention K/V and mask are expanded, not copied (:attr:`shares_cross`)."""
        if self.batch_size == 1:
            ck = [k.expand(n, -1, -1, -1) for k in self.cross_k]
            cv = [v.expand(n, -1, -1, -1) for v in self.cross_v]
            mask = None if self.cross_mask is None else self.cross_mask.expand(n, -1, -1, -1)
        else:
            ck = [k.repeat_interleave(n, dim=0) for k in self.cross_k]
            cv = [v.repeat_interleave(n, dim=0) for v in self.cross_v]
            mask = None if self.cross_mask is None else self.cross_mask.repeat_interleave(n, dim=0)
        max_len = self.max_len if max_len is None else max_len
        if not self.length <= max_len <= self.max_len:
            raise ValueError(f"cannot repeat a cache of {self.length} tokens into room for {max_len}")

        def copies(t: Tensor) -> Tensor:
            out = t.new_empty((t.shape[0] * n, t.shape[1], max_len, t.shape[3]))
            out[:, :, : self.length] = t[:, :, : self.length].repeat_interleave(n, dim=0)
            return out

        sk, sv = [copies(k) for k in self.self_k], [copies(v) for v in self.self_v]
        return KVCache(ck, cv, sk, sv, self.length, cross_mask=mask)

    @property
    def shares_cross(self) -> bool:
        """Every row attends to the same window (one window's beams): cross-attention may
        batch all rows' queries against a single copy of its keys."""
        k = self.cross_k[0]
        return k.shape[0] > 1 and k.stride(0) == 0

    def select(self, rows: Tensor) -> KVCache:
        """A new cache of the given rows only (drops finished sequences from a batch)."""
        pick = [t.index_select(0, rows) for t in self.cross_k]
        pick_v = [t.index_select(0, rows) for t in self.cross_v]
        sk = [t.index_select(0, rows) for t in self.self_k]
        sv = [t.index_select(0, rows) for t in self.self_v]
        mask = None if self.cross_mask is None else self.cross_mask.index_select(0, rows)
        return KVCache(pick, pick_v, sk, sv, self.length, cross_mask=mask)
