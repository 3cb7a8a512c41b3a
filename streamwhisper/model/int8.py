"""Int8 Linears with an int8 scale per token: the encoder's fast path on CPUs without fast bfloat16.

fbgemm's dynamic int8 Linear scales a whole call's activations by one number, so a token of
small values shares its 256 levels with the call's largest: quantised so, the tiny.en encoder's
output is 17 % off float32 (relative norm over three speech windows). Scaling each token to its
own largest value first, and back after, gives every token the whole range: 6.4 % off.

The arithmetic is fbgemm's, which sums u8 x s8 pairs into 16 bits on CPUs without AVX-512 VNNI
(saturating when both use 8 bits), so activations use 7 bits (what PyTorch calls
``reduce_range``) on every CPU and the sums are exact everywhere: the same result on AVX2 and
AVX-512 CPUs. Each token is quantised at the same fixed scale once normalised, so a window gives
the same features batched with others as alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

# Left in float32 by the int8_encoder compute type: the first block's attention projections. Its
# error, carried through every block after it, is most of the encoder's: tiny.en's output on nine
# speech windows of tests/data is 7.7 % off float32 with every Linear int8 and 5.1 % with these two
# kept (2026-11-27, tuning-log). They are 4 of the tiny encoder's 48 d x d products.
FLOAT32_LINEARS = ("blocks.0.attn.qkv", "blocks.0.attn.out")

# A normalised token lies in [-1, 1]: codes 0..128 around zero point 64, so a pair of products
# (weights -127..127) sums to at most 2 x 128 x 127 = 32512, within fbgemm's AVX2 16-bit sums.
_SCALE, _ZERO_POINT = 2.0 / 127, 64

_LINEAR_FLOAT16 = torch.ops.quantized.linear_dynamic_fp16.default
_LINEAR_INT8 = torch.ops.quantized.linear_dynamic.default


@contextmanager
def deprecation_quieted() -> Iterator[None]:
    """torch 2.13's warnings that its quantised tensor types and ``torch.ao.quantization`` are
    deprecated, silenced: they still work, and the version is pinned. Revisit (torchao) when the
    pin moves."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*", category=UserWarning)
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning)
        yield


def linear_names(module: nn.Module, keep: tuple[str, ...] = ()) -> list[str]:
    """The names of ``module``'s plain Linears, but for those ending in ``keep``."""
    return [name for name, m in module.named_modules() if type(m) is nn.Linear and not name.endswith(keep)]


class TokenScaledInt8Linear(nn.Module):
    """A Linear's weights in int8 (one scale per output channel), its inputs in int8 (one per token)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scales = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127).double()
        zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
        with deprecation_quieted():
            qweight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
        self._packed = torch.ops.quantized.linear_prepack(qweight, None)
        bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros(weight.shape[0])
        self.bias: Tensor
        self.register_buffer("bias", bias)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1]).float()
        scale = rows.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
        y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            rows / scale, _SCALE, _ZERO_POINT, self._packed
        )
        return torch.addcmul(self.bias, y, scale).reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class PackedLinear(nn.Module):
    """A Linear that ``torch.ao.quantization.quantize_dynamic`` quantised (fbgemm's packed weights,
    float16 or int8), its kernel called straight.

    The module torch makes checks its dtype and version, calls the kernel through its overload
    packet (which looks for fake script objects in the arguments) and casts the result to the
    input's dtype, every call. A decoded token calls 25 of these: 0.2 ms of a 4.5 ms step
    (tiny.en, AVX2 EPYC). Same kernels, same weights, so the same results.
    """

    def __init__(self, quantized: torch.ao.nn.quantized.dynamic.Linear) -> None:
        super().__init__()
        params = quantized._packed_params  # its LinearPackedParams
        self.weight_dtype: torch.dtype = params.dtype
        self._packed = params._packed_params
        self.in_features, self.out_features = quantized.in_features, quantized.out_features

    def forward(self, x: Tensor) -> Tensor:
        if self.weight_dtype == torch.float16:
            return _LINEAR_FLOAT16(x, self._packed)
        return _LINEAR_INT8(x, self._packed, True)  # reduce_range, as torch's module (version 4) asks

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights={self.weight_dtype}"


def _replace(module: nn.Module, names: list[str], make: Callable[[Any], nn.Module]) -> nn.Module:
    """``module`` with each submodule named in ``names`` replaced by ``make(submodule)``, in place."""
    for name in names:
        parent_name, _, leaf = name.rpartition(".")
        parent = module.get_submodule(parent_name)
        setattr(parent, leaf, make(getattr(parent, leaf)))
    return module


def packed_linears(module: nn.Module) -> nn.Module:
    """``module`` with each of its dynamically quantised Linears replaced by a :class:`PackedLinear`."""
    quantized = [name for name, m in module.named_modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    return _replace(module, quantized, PackedLinear)


def int8_linears(module: nn.Module, keep: tuple[str, ...] = ()) -> nn.Module:
    """``module`` with each of its Linears replaced by a :class:`TokenScaledInt8Linear`, in place,
    but for those whose names end in ``keep``."""
    return _replace(module, linear_names(module, keep), TokenScaledInt8Linear)


def has_int8_linears(module: nn.Module) -> bool:
    return any(isinstance(m, TokenScaledInt8Linear) for m in module.modules())
