"""runtime.toml: defaults, every key, one-line errors."""

from __future__ import annotations

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
