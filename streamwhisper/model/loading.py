"""``load_model``: a ready-to-run Whisper from a model name or path, on the device and dtype asked."""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import torch
from torch import nn

from ..errors import ConfigError
from .int8 import FLOAT32_LINEARS, deprecation_quieted, int8_linears, linear_names, packed_linears
from .memory import release_free_memory
from .sources import DEFAULT_MODEL, resolve_weights
from .weights import build_model
from .whisper import Whisper

log = logging.getLogger(__name__)

DTYPES = {
    "mixed": torch.float32,  # bf16 encoder, fp16-weight decoder, int8 logits: fastest accurate
    "int8_encoder": torch.float32,  # mixed, with int8 encoder Linears (per token): faster, less accurate
    "float32": torch.float32,
    "int8_logits": torch.float32,  # fp32 with an int8 output projection
    "int8": torch.float32,  # every Linear int8: fastest, slightly less accurate
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# the compute types that quantise on the CPU (and so cannot run on CUDA)
CPU_QUANTISED = ("mixed", "int8_encoder", "int8_logits", "int8")


def _quantized(
    module: nn.Module, per_channel: bool, dtype: torch.dtype = torch.qint8, keep: tuple[str, ...] = ()
) -> nn.Module:
    """``module``'s Linears dynamically quantised in place, but for those named ending in ``keep``."""
    if dtype == torch.float16:  # float16 weights, float32 activations and arithmetic
        qconfig = torch.ao.quantization.float16_dynamic_qconfig
    elif per_channel:
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    else:
        qconfig = torch.ao.quantization.default_dynamic_qconfig
    with deprecation_quieted():
        names = dict.fromkeys(linear_names(module, keep), qconfig)
        return packed_linears(torch.ao.quantization.quantize_dynamic(module, names, inplace=True))


def cpu_has(*flags: str) -> bool:
    """Whether this CPU reports one of ``flags`` (Linux /proc/cpuinfo; False elsewhere)."""
    try:
        reported = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return False
    return any(flag in reported for flag in flags)


@functools.cache
def bfloat16_pays_off() -> bool:
    """Whether this CPU multiplies bfloat16 matrices clearly faster than float32 (measured once).

    The CPU flag alone does not decide: an Intel Xeon here reports AVX-512 BF16 without AMX
    and runs bfloat16 GEMMs at half its float32 speed (165 against 310 GFLOP/s; the tiny.en
    encoder 280 ms a 30 s window instead of 155), where an AMD EPYC (Zen 4) runs them twice as
    fast. An encoder-sized GEMM in each type, best of five after a warm-up (about 80 ms).
    """
    if not cpu_has("avx512_bf16", "amx_bf16"):
        return False
    dtypes = (torch.float32, torch.bfloat16)
    operands = {dtype: (torch.randn(1500, 384, dtype=dtype), torch.randn(1536, 384, dtype=dtype)) for dtype in dtypes}
    times: dict[torch.dtype, list[float]] = {dtype: [] for dtype in dtypes}
    with torch.inference_mode():
        # the two types in turn, so that a burst of load from other processes slows both
        for i in range(7):
            for dtype, (x, w) in operands.items():
                t0 = time.perf_counter()
                torch.matmul(x, w.T)
                if i >= 2:
                    times[dtype].append(time.perf_counter() - t0)
    fp32, bf16 = (min(times[dtype]) for dtype in dtypes)
    log.debug("GEMM 1500x384x1536: float32 %.2f ms, bfloat16 %.2f ms", fp32 * 1e3, bf16 * 1e3)
    return bf16 < 0.8 * fp32


def quantize(model: Whisper, scope: str) -> Whisper:
    """Dynamic quantisation on the CPU (int8: weights int8, activations quantised per call).

    ``scope`` "logits": only the output projection, per output channel. It is the largest read
    per decoded token (n_vocab x n_state, 80 MB for tiny in fp32) and argmax barely notices its
    rounding: tiny.en read_en WER 7.1 % against 7.3 % in fp32. ``scope`` "all": every Linear,
    fastest, but quantised activations cost tiny.en about 0.4 WER points on read_en.
    ``scope`` "mixed": the logits as for "logits"; the decoder's other Linears keep float16
    weights (half the bytes read per token, float32 arithmetic: base decodes a token in 60 % of
    the time, WER unchanged; but each window's cross-attention K/V projection, a large GEMM,
    stays float32); where the CPU's bfloat16 GEMMs are faster (AVX-512 BF16 or AMX,
    and measured so: ``bfloat16_pays_off``) the encoder runs under bfloat16 autocast, the
    residual stream staying float32 (about 2x faster), and so does each window's
    cross-attention K/V projection (the decoder's one large GEMM).
    tiny.en read_en WER 7.2 %, longform 6.2 %, as the float32 encoder gives.
    ``scope`` "int8_encoder": "mixed", but the encoder's Linears int8 with a scale per token
    (:mod:`.int8`) on every CPU, but for ``FLOAT32_LINEARS``: on an AVX2 EPYC an encoder pass
    283 against 319 ms and offline transcription 1.3x faster, but offline read_en WER 7.8 against
    7.1 % (docs/benchmarks.md, 2026-11-25, before the first block was kept float32).
    """
    if torch.backends.quantized.engine not in ("x86", "fbgemm") and "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    with torch.device("meta"):  # (not an initialised weight of its own: it is replaced at once)
        logits = nn.Linear(model.dims.n_text_state, model.dims.n_vocab, bias=False)
    # the embedding table itself, not a copy: it becomes float16 below, once the int8 weights are packed
    logits.weight = nn.Parameter(model.decoder.token_embedding.weight.detach(), requires_grad=False)
    model.decoder.logits = _quantized(nn.Sequential(logits), per_channel=True)
    # The table now only looks tokens up: float16 holds the shipped float16 weights exactly, and
    # the float32 positional embedding added to each looked-up row keeps the sum float32
    # (tiny: 38 MB less resident).
    model.decoder.token_embedding.half()
    if scope in ("mixed", "int8_encoder"):
        bf16 = scope == "mixed" and bfloat16_pays_off()
        if torch.backends.quantized.engine in ("x86", "fbgemm"):
            # ... but the cross-attention K/V projection, one GEMM over 1500 frames a window:
            # float32 runs it at the CPU's peak, float16 weights 13 % slower (tiny: 16.4 against
            # 14.5 ms a request on the Xeon)
            blocks = _quantized(model.decoder.blocks, per_channel=False, dtype=torch.float16, keep=("cross_attn.kv",))
            model.decoder.blocks = blocks  # type: ignore[assignment]
        if bf16:
            model.encoder.autocast_dtype = torch.bfloat16
            for block in model.decoder.blocks:
                block.cross_attn.autocast_dtype = torch.bfloat16  # type: ignore[union-attr]
    if scope == "int8_encoder":
        int8_linears(model.encoder, keep=FLOAT32_LINEARS)
    if scope == "all":
        model.encoder = _quantized(model.encoder, per_channel=False)  # type: ignore[assignment]
        model.decoder.blocks = _quantized(model.decoder.blocks, per_channel=False)  # type: ignore[assignment]
    return model


def load_model(
    name: str = DEFAULT_MODEL,
    device: str = "cpu",
    compute_type: str = "default",
    download_root: str | Path | None = None,
    download_url: str | None = None,
) -> Whisper:
    """Load a Whisper model.

    Args:
        name: a known model name (``tiny.en``, ``base``, official names), a CTranslate2 model
            directory, or an OpenAI ``.pt`` checkpoint.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        compute_type: ``default`` (``mixed`` on CPU, ``float16`` on CUDA), ``float32``,
            ``mixed``, ``int8_encoder``, ``int8_logits`` or ``int8`` (CPU only), ``float16`` (CUDA) or ``bfloat16``.
        download_root: where official checkpoints are cached (default ``~/.cache/streamwhisper``).
        download_url: where they are downloaded from (default OpenAI's server).
    Raises:
        ModelLoadError: unknown name, missing package, failed download, corrupt file.
        ConfigError: a device or compute type that cannot be used here.
    """
    is_cuda = device.startswith("cuda")
    if is_cuda and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available")
    if device != "cpu" and not is_cuda:
        raise ConfigError(f"unknown device {device!r} (use cpu or cuda)")
    if compute_type == "default":
        compute_type = "float16" if is_cuda else "mixed"
    if compute_type not in DTYPES:
        raise ConfigError(f"unknown compute type {compute_type!r} (choose from default, {', '.join(DTYPES)})")
    if compute_type in CPU_QUANTISED and is_cuda:
        raise ConfigError(f"{compute_type} is a CPU compute type; use float16 on CUDA")
    if compute_type == "float16" and not is_cuda:
        raise ConfigError("float16 needs CUDA; use int8 or float32 on CPU")
    weights = resolve_weights(name, Path(download_root) if download_root else None, download_url or None)
    model = build_model(weights)
    model.name = name  # type: ignore[assignment]
    del weights
    if compute_type in CPU_QUANTISED:
        model = quantize(model, {"int8": "all", "int8_logits": "logits"}.get(compute_type, compute_type))
    elif compute_type != "float32":
        model = model.to(DTYPES[compute_type])
    log.info("loaded model %s (%s, %s)", name, device, compute_type)
    model = model.to(device)
    release_free_memory()  # the weight file's temporary copies
    return model
