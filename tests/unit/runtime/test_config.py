"""runtime.toml: defaults, every key, one-line errors."""

from __future__ import annotations

import json
import os

import pytest

from gpunode.runtime import config


def test_defaults_without_file(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUNODE_RUNTIME_CONFIG", raising=False)
    monkeypatch.setattr(config, "DEFAULT_PATH", tmp_path / "none.toml")
    cfg = config.load()
    assert cfg.runtimes == ["runc", "crun"] and cfg.source == "<defaults>"


def test_full_file(tmp_path):
    f = tmp_path / "runtime.toml"
    f.write_text(
        'runtimes = ["crun"]\nlog-level = "debug"\ndriver-root = "/run/nvidia/driver"\n'
        "accept-envvar-unprivileged = false\naccept-volume-mounts = true\n"
        'default-capabilities = ["utility"]\n'
    )
    cfg = config.load(f)
    assert cfg.runtimes == ["crun"] and cfg.log_level == "debug"
    assert cfg.driver_root == "/run/nvidia/driver"
    assert cfg.accept_envvar_unprivileged is False and cfg.accept_volume_mounts is True


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("runtimes = 'runc'\n", "runtimes = 'runc' is not valid; expected a list of strings"),
        ("log-level = 'loud'\n", "log-level 'loud' is not one of debug, info, warning, error"),
        ("colour = 1\n", "unknown key 'colour'; accepted keys: accept-envvar-unprivileged"),
        ("accept-volume-mounts = 'yes'\n", "expected true or false"),
        ("default-capabilities = ['warp']\n", "default-capabilities has 'warp'"),
        ("driver-root = 'relative'\n", "driver-root 'relative' must be an absolute path"),
        ("runtimes = [\n", "not valid TOML"),
        ("runtimes = []\n", "runtimes is empty"),
    ],
)
def test_bad_config_is_one_line(tmp_path, text, expect):
    f = tmp_path / "runtime.toml"
    f.write_text(text)
    with pytest.raises(config.ConfigError) as err:
        config.load(f)
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_explicit_missing_config(tmp_path):
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(tmp_path / "missing.toml")


def test_cdi_spec_dirs_must_be_absolute(tmp_path):
    f = tmp_path / "runtime.toml"
    f.write_text('cdi-spec-dirs = ["cdi"]\n')
    with pytest.raises(config.ConfigError, match="must list absolute directories"):
        config.load(f)


def test_deprecated_ldconfig_key_is_accepted_and_ignored(tmp_path):
    """runtime.toml files written for gpunode versions that ran ldconfig keep working."""
    f = tmp_path / "runtime.toml"
    f.write_text('ldconfig = "/sbin/ldconfig"\nlog-file = ""\n')
    assert config.load(f).log_file == ""
    f.write_text('ldconfig = "relative/once/an/error"\n')
    config.load(f)
    f.write_text("ldconfig = 1\n")  # still a string key
    with pytest.raises(config.ConfigError, match="ldconfig = 1 is not valid; expected a string"):
        config.load(f)


# ----------------------------------------------- the parsed default file, kept (PARSED_CACHE)


@pytest.fixture
def default_file(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUNODE_RUNTIME_CONFIG", raising=False)
    f = tmp_path / "etc/runtime.toml"
    f.parent.mkdir()
    monkeypatch.setattr(config, "DEFAULT_PATH", str(f))
    cache = str(tmp_path / "run/gpunode/runtime-toml.json")
    monkeypatch.setattr(config, "PARSED_CACHE", cache)
    monkeypatch.delenv("GPUNODE_RUNTIME_CONFIG_CACHE")  # the default place: PARSED_CACHE
    return f


def _no_tomllib(monkeypatch):
    import tomllib

    def refuse(text):
        raise AssertionError("tomllib used despite a valid cache")

    monkeypatch.setattr(tomllib, "loads", refuse)


def test_default_file_is_parsed_once_then_read_from_the_cache(default_file, monkeypatch):
    default_file.write_text('runtimes = ["crun"]\nlog-level = "debug"\n')
    first = config.load()
    cache = config.PARSED_CACHE
    assert os.stat(cache).st_mode & 0o777 == 0o644
    with monkeypatch.context() as m:
        _no_tomllib(m)
        again = config.load()
    assert again == first and again.runtimes == ["crun"] and again.log_level == "debug"
    # a changed file is parsed again, never answered from the old entry
    default_file.write_text('runtimes = ["runc"]\n')
    assert config.load().runtimes == ["runc"]


def test_cached_values_are_checked_as_parsed_ones(default_file):
    default_file.write_text("colour = 1\n")
    for _ in range(2):  # the second answer comes from the cache
        with pytest.raises(config.ConfigError, match="unknown key 'colour'"):
            config.load()


@pytest.mark.parametrize("damage", ["other-data", "corrupt", "writable", "symlink"])
def test_a_cache_that_cannot_be_trusted_is_not_used(default_file, tmp_path, damage):
    text = 'runtimes = ["crun"]\n'
    default_file.write_text(text)
    config.load()
    cache = config.PARSED_CACHE
    if damage == "other-data":  # an entry for another text (a stale one)
        with open(cache, "w") as fh:
            json.dump({"toml": 'runtimes = ["x"]\n', "data": {"runtimes": ["/tmp/evil"]}}, fh)
    elif damage == "corrupt":
        with open(cache, "w") as fh:
            fh.write('{"toml": ')
    elif damage == "writable":
        with open(cache, "w") as fh:
            json.dump({"toml": text, "data": {"runtimes": ["/tmp/evil"]}}, fh)
        os.chmod(cache, 0o646)
    else:
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps({"toml": text, "data": {"runtimes": ["/tmp/evil"]}}))
        os.unlink(cache)
        os.symlink(forged, cache)
    assert config.load().runtimes == ["crun"]


def test_the_cache_follows_the_text_whatever_the_path(default_file, tmp_path, monkeypatch):
    other = tmp_path / "other.toml"
    other.write_text('runtimes = ["crun"]\n')
    default_file.write_text('runtimes = ["runc"]\n')
    assert config.load(other).runtimes == ["crun"]
    assert config.load().runtimes == ["runc"]  # its own text, not the other file's entry
    with monkeypatch.context() as m:
        _no_tomllib(m)
        assert config.load().runtimes == ["runc"]


def test_the_cache_can_be_moved_or_turned_off(default_file, tmp_path, monkeypatch):
    default_file.write_text('runtimes = ["crun"]\n')
    moved = tmp_path / "elsewhere.json"
    monkeypatch.setenv("GPUNODE_RUNTIME_CONFIG_CACHE", str(moved))
    config.load()
    assert moved.exists() and not os.path.exists(config.PARSED_CACHE)
    monkeypatch.setenv("GPUNODE_RUNTIME_CONFIG_CACHE", "")
    moved.unlink()
    config.load()
    assert not moved.exists() and not os.path.exists(config.PARSED_CACHE)
