"""Tests for streamwhisper.config: the documented TOML file, layering and validation.

``config/streamwhisper.toml`` must document every key of :class:`Config` with its default; TOML has
no null, so keys whose default is None are present only as a commented-out example line.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from streamwhisper import cli
from streamwhisper.audio.vad import VadConfig
from streamwhisper.config import Config, as_toml_defaults, load_config
from streamwhisper.errors import ConfigError
from streamwhisper.model.config import ModelConfig, RecognizerConfig
from streamwhisper.model.fallback import FallbackRule
from streamwhisper.runtime import server
from streamwhisper.runtime.config import ServerConfig
from streamwhisper.streaming.config import PolicyConfig, StreamingConfig

CONFIG_FILE = Path(__file__).resolve().parents[1] / "config" / "streamwhisper.toml"


def _none_keys(defaults: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths (section..., key) of every default that is None."""
    found = []
    for key, value in defaults.items():
        if isinstance(value, dict):
            found += _none_keys(value, (*prefix, key))
        elif value is None:
            found.append((*prefix, key))
    return found


def _without_none(defaults: dict[str, Any]) -> dict[str, Any]:
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in defaults.items() if v is not None}


def _section_lines(text: str) -> dict[str, list[str]]:
    """Lines of the file per ``[table]`` header (dotted names as written)."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        header = re.fullmatch(r"\[([\w.]+)\]\s*", line)
        if header:
            current = header.group(1)
            sections[current] = []
        else:
            sections[current].append(line)
    return sections


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- the documented file


def test_config_file_equals_defaults() -> None:
    loaded = tomllib.loads(CONFIG_FILE.read_text(encoding="utf-8"))
    assert loaded == _without_none(as_toml_defaults())


def test_config_file_none_defaults_are_commented_out() -> None:
    # The only way to document a None default in TOML: a commented-out example line.
    none_keys = _none_keys(as_toml_defaults())
    assert ("streaming", "language") in none_keys
    sections = _section_lines(CONFIG_FILE.read_text(encoding="utf-8"))
    for *section, key in none_keys:
        lines = sections[".".join(section)]
        assert any(re.match(rf"#\s*{key}\s*=", line) for line in lines), f"{'.'.join(section)}.{key} not documented"
        assert not any(re.match(rf"{key}\s*=", line) for line in lines)


def test_config_file_has_a_comment_for_every_key() -> None:
    sections = _section_lines(CONFIG_FILE.read_text(encoding="utf-8"))
    keys = 0
    for name, lines in sections.items():
        for i, line in enumerate(lines):
            if re.match(r"\w+\s*=", line):
                keys += 1
                assert i > 0 and lines[i - 1].startswith("#"), f"[{name}] {line!r} has no comment above it"
    n_fields = sum(1 for _ in _leaf_fields(Config()))
    assert keys == n_fields - len(_none_keys(as_toml_defaults()))


def _leaf_fields(obj: Any):  # type: ignore[no-untyped-def]
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaf_fields(value)
        else:
            yield f.name


def test_as_toml_defaults_covers_every_dataclass_field() -> None:
    defaults = as_toml_defaults()
    assert set(defaults) == {"model", "recognizer", "streaming", "server"}
    assert set(defaults["server"]) == {f.name for f in dataclasses.fields(ServerConfig)}
    assert set(defaults["model"]) == {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(defaults["recognizer"]) == {f.name for f in dataclasses.fields(RecognizerConfig)}
    assert set(defaults["recognizer"]["fallback"]) == {f.name for f in dataclasses.fields(FallbackRule)}
    assert set(defaults["streaming"]) == {f.name for f in dataclasses.fields(StreamingConfig)}
    assert set(defaults["streaming"]["vad"]) == {f.name for f in dataclasses.fields(VadConfig)}
    assert set(defaults["streaming"]["policy"]) == {f.name for f in dataclasses.fields(PolicyConfig)}


def test_loading_the_config_file_gives_the_defaults() -> None:
    assert load_config(CONFIG_FILE, env={}) == Config()


# ---------------------------------------------------------------- layering


def test_layers_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[model]\nname = "base"\nthreads = 2\n[streaming]\nlanguage = "de"\n'
        "[streaming.vad]\nendpoint_ms = 700\nframe_ms = 20\n",
    )
    from_file = load_config(path, env={})
    assert (from_file.model.name, from_file.model.threads) == ("base", 2)
    assert (from_file.streaming.vad.endpoint_ms, from_file.streaming.vad.frame_ms) == (700, 20)
    assert from_file.streaming.language == "de"
    assert from_file.streaming.vad.pre_roll_ms == VadConfig().pre_roll_ms  # untouched keys keep defaults

    env = {"STREAMWHISPER_MODEL_NAME": "tiny", "STREAMWHISPER_STREAMING_VAD_ENDPOINT_MS": "900"}
    with_env = load_config(path, env=env)
    assert with_env.model.name == "tiny"
    assert with_env.streaming.vad.endpoint_ms == 900
    assert with_env.model.threads == 2 and with_env.streaming.vad.frame_ms == 20

    final = load_config(path, env=env, overrides={"model": {"name": "small.en", "threads": None}})
    assert final.model.name == "small.en"
    assert final.model.threads == 2  # a None override (flag not given) keeps the layers below
    assert final.streaming.vad.endpoint_ms == 900


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWHISPER_MODEL_NAME", "base")
    monkeypatch.setenv("STREAMWHISPER_STREAMING_VAD_ENDPOINT_MS", "650")
    config = load_config()
    assert config.model.name == "base"
    assert config.streaming.vad.endpoint_ms == 650


def test_env_values_are_coerced_to_field_types() -> None:
    env = {
        "STREAMWHISPER_MODEL_THREADS": "3",
        "STREAMWHISPER_STREAMING_MIN_STEP_S": "0.7",
        "STREAMWHISPER_STREAMING_LANGUAGE": "de",
        "STREAMWHISPER_STREAMING_POLICY_CONDITION_ON_COMMITTED": "false",
        "STREAMWHISPER_STREAMING_POLICY_LOGPROB_FLOOR": "-2",
    }
    config = load_config(env=env)
    assert config.model.threads == 3
    assert config.streaming.min_step_s == 0.7
    assert config.streaming.language == "de"
    assert config.streaming.policy.condition_on_committed is False
    assert config.streaming.policy.logprob_floor == -2.0


def test_env_empty_value_sets_an_optional_key_to_none(tmp_path: Path) -> None:
    path = _write(tmp_path, '[streaming]\nlanguage = "de"\n')
    assert load_config(path, env={"STREAMWHISPER_STREAMING_LANGUAGE": ""}).streaming.language is None


def test_env_variables_that_are_not_settings_are_ignored() -> None:
    env = {"STREAMWHISPER_REGEN_GOLDEN": "1", "STREAMWHISPER_SHARED_DATA": "/data", "OTHER_MODEL_NAME": "base"}
    assert load_config(env=env) == Config()


def test_older_variables_are_read_as_the_settings_they_name() -> None:
    env = {"STREAMWHISPER_CACHE": "/tmp/x", "STREAMWHISPER_DOWNLOAD_URL": "http://x", "XDG_CACHE_HOME": "/xdg"}
    model = load_config(env=env).model
    assert (model.download_root, model.download_url) == ("/tmp/x", "http://x")
    assert load_config(env={"XDG_CACHE_HOME": "/xdg"}).model.download_root == "/xdg/streamwhisper"
    newer = {**env, "STREAMWHISPER_MODEL_DOWNLOAD_ROOT": "/new"}
    assert load_config(env=newer).model.download_root == "/new"  # the setting's own variable wins


def test_nested_overrides() -> None:
    config = load_config(env={}, overrides={"streaming": {"vad": {"aggressiveness": 1}, "min_step_s": 2}})
    assert config.streaming.vad.aggressiveness == 1
    assert config.streaming.min_step_s == 2.0 and isinstance(config.streaming.min_step_s, float)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[model]\nnosuch = 1\n", r"unknown setting 'nosuch'.*known: .*compute_type"),
        ("[nosuch]\nx = 1\n", r"unknown section \[nosuch\]"),
        ("[streaming.vad]\nnosuch_ms = 1\n", r"streaming.*vad.*unknown setting 'nosuch_ms'"),
        ('[model]\nthreads = "two"\n', r"model.*threads"),
        ("[model]\nthreads = true\n", r"model.*threads.*expected int, got bool"),
        ('[streaming.policy]\ncondition_on_committed = "maybe"\n', r"condition_on_committed.*not a boolean"),
        ("[streaming]\nvad = 3\n", r"streaming.*vad must be a table"),
        ("model = 3\n", r"\[model\] must be a table"),
        ("[model\nname = 1\n", r"invalid TOML"),
    ],
)
def test_bad_file_raises_config_error(tmp_path: Path, toml: str, expected: str) -> None:
    path = _write(tmp_path, toml)
    with pytest.raises(ConfigError, match=expected) as info:
        load_config(path, env={})
    assert str(path) in str(info.value)  # the message names the file


@pytest.mark.parametrize(
    "toml",
    [
        '[model]\nname = ["tiny.en"]\n',
        "[model]\ndevice = 5\n",
        "[streaming]\nmin_step_s = true\n",
        "[model]\nthreads = 1.5\n",
    ],
)
def test_wrong_toml_type_raises(tmp_path: Path, toml: str) -> None:
    with pytest.raises(ConfigError):
        load_config(_write(tmp_path, toml), env={})


def test_missing_file_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.toml", env={})


def test_bad_env_value_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"environment.*model.*threads"):
        load_config(env={"STREAMWHISPER_MODEL_THREADS": "many"})
    with pytest.raises(ConfigError, match=r"environment.*vad.*endpoint_ms"):
        load_config(env={"STREAMWHISPER_STREAMING_VAD_ENDPOINT_MS": "long"})


def test_unknown_override_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"command line.*unknown setting 'colour'"):
        load_config(env={}, overrides={"model": {"colour": "red"}})
    with pytest.raises(ConfigError, match=r"unknown section \[daemon\]"):
        load_config(env={}, overrides={"daemon": {"port": 1}})


@pytest.mark.parametrize(
    ("section", "values", "expected"),
    [
        ("model", {"threads": -1}, "threads must be >= 0"),
        ("server", {"port": 70000}, "port must be in"),
        ("server", {"tls_cert": "cert.pem"}, "given together"),
        ("server", {"degrade_lag_s": 9.0}, "degrade_lag_s < server.refuse_lag_s"),
        ("streaming", {"n_mels": 64}, "n_mels must be 80 or 128"),
        ("streaming", {"task": "dance"}, "task must be transcribe or translate"),
        ("streaming", {"min_step_s": 0.01}, "min_step_s"),
        ("streaming", {"max_window_s": 40.0}, "max_window_s"),
        ("streaming", {"force_keep_s": 25.0}, "force_keep_s < force_commit_s"),
        ("streaming", {"trim_after_s": -1.0}, "trim_after_s"),
        ("streaming", {"vad": {"frame_ms": 25}}, "frame_ms must be 10, 20 or 30"),
        ("streaming", {"vad": {"aggressiveness": 4}}, "aggressiveness"),
        ("streaming", {"vad": {"start_speech_ms": 400}}, "start_speech_ms"),
        ("streaming", {"vad": {"endpoint_ms": 10}}, "endpoint_ms"),
        ("streaming", {"vad": {"pre_roll_ms": 5000}}, "pre_roll_ms"),
        ("streaming", {"policy": {"no_speech_hard_threshold": 1.5}}, "no_speech_hard_threshold"),
        ("streaming", {"policy": {"loop_min_repeats": 1}}, "loop_min_repeats"),
        ("streaming", {"policy": {"max_prompt_tokens": 500}}, "max_prompt_tokens"),
        ("recognizer", {"audio_ctx": "half"}, "audio_ctx must be auto, fit or full"),
        ("recognizer", {"beam_size": -1}, "beam_size must be >= 0"),
        ("recognizer", {"encode_batch": 0}, "encode_batch"),
        ("recognizer", {"pad": "noise"}, "pad must be silence or zero"),
        ("recognizer", {"fallback": {"temperatures": ()}}, "temperatures"),
        ("recognizer", {"fallback": {"temperatures": (0.4, 0.0)}}, "increasing order"),
        ("recognizer", {"fallback": {"compression_ratio_threshold": 0.0}}, "compression_ratio_threshold"),
    ],
)
def test_invalid_values_are_rejected(section: str, values: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(env={}, overrides={section: values})


def test_dataclasses_validate_on_construction() -> None:
    with pytest.raises(ConfigError):
        ModelConfig(threads=-2)
    with pytest.raises(ConfigError):
        VadConfig(frame_ms=15)
    with pytest.raises(ConfigError):
        PolicyConfig(loop_max_ngram=0)
    with pytest.raises(ConfigError):
        StreamingConfig(force_commit_s=29.8)  # leaves less than min_step_s of room in the window
    with pytest.raises(ConfigError):
        RecognizerConfig(min_ctx_s=40.0)
    with pytest.raises(ConfigError):
        RecognizerConfig(alone_min_ctx_s=31.0)
    with pytest.raises(ConfigError):
        FallbackRule(no_speech_threshold=2.0)
    assert StreamingConfig(language="en").language == "en"


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().model.name = "base"  # type: ignore[misc]


def test_each_threshold_has_one_definition() -> None:
    """The streaming policy's guards start from the fallback rule's (Whisper's) thresholds."""
    rule = FallbackRule()
    names = {f.name for f in dataclasses.fields(PolicyConfig)}
    assert not names & {"compression_ratio_threshold", "no_speech_threshold", "no_speech_logprob"}, names
    assert RecognizerConfig().fallback == dataclasses.replace(rule, temperatures=(0.0, 0.4))


@dataclasses.dataclass(frozen=True)
class _Decoded:
    compression_ratio: float
    avg_logprob: float
    no_speech_prob: float


@pytest.mark.parametrize(
    ("ratio", "logprob", "no_speech", "again"),
    [
        (1.5, -0.3, 0.1, False),  # speech
        (2.6, -0.3, 0.1, True),  # a loop
        (1.5, -1.2, 0.1, True),  # garbage
        (1.5, -1.2, 0.7, False),  # silence
        (2.6, -1.03, 0.7, False),  # silence wins over a loop (faster-whisper on news120 at 114 s)
        (2.6, -0.9, 0.7, True),  # ... but not over a loop the decoder is sure of
        (1.5, -0.9, 0.7, False),  # sure text the model calls silent: Whisper's skip rule decides
    ],
)
def test_the_fallback_rule_is_whisper_s(ratio: float, logprob: float, no_speech: float, again: bool) -> None:
    """openai-whisper's decode_with_fallback (and faster-whisper's): a loop or a low average
    log-probability asks for the next temperature, unless no-speech is above its threshold with a
    low log-probability."""
    rule = FallbackRule()
    first = _Decoded(ratio, logprob, no_speech)
    assert rule.needs_fallback(first) is again
    tried: list[float] = []

    def decode_at(temperature: float) -> _Decoded:
        tried.append(temperature)
        return first if temperature == 0.0 else _Decoded(1.2, -0.2, no_speech)

    assert rule.decode(decode_at) == (_Decoded(1.2, -0.2, no_speech) if again else first)
    assert tried == ([0.0, 0.2] if again else [0.0])


# ---------------------------------------------------------------- the recogniser the CLI builds


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Run ``streamwhisper serve`` up to the daemon, with a small random model; collects the
    recognisers it builds."""
    import torch

    from streamwhisper.model.whisper import ModelDimensions, Whisper

    dims = ModelDimensions(
        n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=1, n_audio_layer=1,
        n_vocab=51864, n_text_ctx=448, n_text_state=64, n_text_head=1, n_text_layer=1,
    )
    with torch.device("meta"):
        model = Whisper(dims)
    model = model.to_empty(device="cpu")
    built: list[Any] = []

    class Daemon:
        url = "ws://127.0.0.1:0"

        def __init__(self, server: Any, streaming: Any, recognizer: Any, model_name: str, **hooks: Any) -> None:
            built.append(recognizer)

        async def start(self) -> None:
            pass

        async def serve_forever(self) -> None:
            pass

    for name in [n for n in os.environ if n.startswith("STREAMWHISPER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(cli, "load_configured_model", lambda config: model)
    monkeypatch.setattr(server, "Daemon", Daemon)
    monkeypatch.setattr(server, "warm_up", lambda recognizer: None)
    return built


RECOGNIZER_TOML = '[recognizer]\nbeam_size = 2\naudio_ctx = "fit"\n[recognizer.fallback]\ntemperatures = [0.0, 0.2]\n'


@pytest.mark.parametrize("layer", ["toml", "env", "flags"])
def test_recognizer_settings_reach_the_recognizer_serve_builds(
    layer: str, served: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["serve"]
    if layer == "toml":
        argv += ["--config", str(_write(tmp_path, RECOGNIZER_TOML))]
    elif layer == "env":
        monkeypatch.setenv("STREAMWHISPER_RECOGNIZER_BEAM_SIZE", "2")
        monkeypatch.setenv("STREAMWHISPER_RECOGNIZER_AUDIO_CTX", "fit")
        monkeypatch.setenv("STREAMWHISPER_RECOGNIZER_FALLBACK_TEMPERATURES", "0,0.2")
    else:
        argv += ["--beam-size", "2", "--audio-ctx", "fit", "--temperatures", "0,0.2"]
    assert cli.main(argv) == 0
    (recognizer,) = served
    expected = RecognizerConfig(beam_size=2, audio_ctx="fit", fallback=FallbackRule(temperatures=(0.0, 0.2)))
    assert recognizer.config == expected


def test_recognizer_flag_beats_env_beats_file(
    served: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMWHISPER_RECOGNIZER_BEAM_SIZE", "3")
    assert cli.main(["serve", "--config", str(_write(tmp_path, RECOGNIZER_TOML)), "--beam-size", "0"]) == 0
    monkeypatch.delenv("STREAMWHISPER_RECOGNIZER_BEAM_SIZE")
    assert cli.main(["serve", "--config", str(_write(tmp_path, RECOGNIZER_TOML))]) == 0
    monkeypatch.setenv("STREAMWHISPER_RECOGNIZER_BEAM_SIZE", "3")
    assert cli.main(["serve", "--config", str(_write(tmp_path, RECOGNIZER_TOML))]) == 0
    assert [r.config.beam_size for r in served] == [0, 2, 3]
    assert all(r.config.audio_ctx == "fit" for r in served)  # the file's other keys stay


def test_transcribe_temperatures_are_offline_options() -> None:
    args = cli.build_parser().parse_args(["transcribe", "a.wav", "--temperatures", "0,0.5", "--beam-size", "3"])
    assert args.temperatures == (0.0, 0.5)
    assert cli.resolve_config(args).recognizer == RecognizerConfig()  # not the streaming recogniser's


def test_bad_temperatures_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.build_parser().parse_args(["serve", "--temperatures", "0,hot"])
    assert info.value.code == cli.EXIT_USAGE
    assert "comma-separated list of numbers" in capsys.readouterr().err


def test_workers_0_is_two_threads_on_a_multicore_cpu_and_one_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamwhisper.runtime.config import inference_threads

    assert ServerConfig().workers == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert inference_threads(0) == inference_threads(0, "cpu") == 2
    assert inference_threads(0, "cuda:0") == 1
    assert inference_threads(3, "cuda") == 3  # what was asked for
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert inference_threads(0) == 1
    with pytest.raises(ConfigError, match="workers"):
        ServerConfig(workers=-1)
