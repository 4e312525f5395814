"""runtime.toml: defaults, every key, one-line errors."""

from __future__ import annotations

import json
import os
import time

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
    # a candidate's content is checked the same way, named as the caller says
    with pytest.raises(config.ConfigError) as candidate:
        config.from_text(text.encode(), "new runtime.toml")
    assert str(candidate.value) == str(err.value).replace(str(f), "new runtime.toml")


def test_candidate_text_gives_what_the_file_would_and_writes_nothing(tmp_path):
    text = 'runtimes = ["crun"]\nlog-level = "debug"\n'
    f = tmp_path / "runtime.toml"
    f.write_text(text)
    cfg = config.from_text(text.encode(), str(f))
    cache = os.environ["GPUNODE_RUNTIME_CONFIG_CACHE"]
    assert not os.path.exists(cache)  # the parsed-content cache is load's, not a candidate's
    assert cfg == config.load(f)


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


@pytest.mark.parametrize(
    "damage", ["other-data", "corrupt", "writable", "symlink", "other-owner", "fifo"]
)
def test_a_cache_that_cannot_be_trusted_is_not_used(default_file, tmp_path, damage):
    text = 'runtimes = ["crun"]\n'
    default_file.write_text(text)
    config.load()
    cache = config.PARSED_CACHE
    if damage == "other-owner" and os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
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
    elif damage == "other-owner":  # another user's file, mode 0644, the runtime's format
        with open(cache, "w") as fh:
            json.dump({"toml": text, "data": {"runtimes": ["/tmp/evil"]}}, fh)
        os.chown(cache, 65534, 65534)
    elif damage == "fifo":  # never waited on
        os.unlink(cache)
        os.mkfifo(cache)
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


# --- the sh first stage's file (config.first_stage) ---


@pytest.fixture
def staged(tmp_path, monkeypatch):
    """runtime.toml (dated in the past, as its directory) as the runtime's own config, and
    where its first-stage file goes."""
    etc = tmp_path / "etc"
    etc.mkdir()
    conf = etc / "runtime.toml"
    monkeypatch.setenv("GPUNODE_RUNTIME_CONFIG", str(conf))
    side = tmp_path / "run" / "first-stage"
    monkeypatch.setenv("GPUNODE_RUNTIME_FIRST_STAGE", str(side))

    def write(text):
        conf.write_text(text)
        past = time.time() - 100
        os.utime(conf, (past, past))
        os.utime(etc, (past, past))
        return conf

    return write, side


def test_first_stage_file_names_runtimes_and_extra_markers(staged):
    write, side = staged
    conf = write(
        'runtimes = ["crun", "/opt/runc"]\n'
        'annotation-prefixes = ["cdi.k8s.io/", "x.cdi.k8s.io/", "example.com/", "a\\"b", ""]\n'
    )
    config.load()
    assert side.read_text().splitlines() == [
        "gpunode-first-stage 1",
        f"config {conf}",
        "runtime crun",
        "runtime /opt/runc",
        # x.cdi.k8s.io/ contains the built-in marker cdi.k8s.io/; a prefix JSON may escape,
        # and the empty one, match any annotation
        "marker example.com/",
        'marker "annotations"',
        "end",
    ]
    assert side.stat().st_mtime > conf.stat().st_mtime


def test_first_stage_file_is_rewritten_only_when_stale(staged):
    write, side = staged
    conf = write('runtimes = ["crun"]\n')
    config.load()
    before = side.stat().st_mtime_ns
    os.utime(side, ns=(before - 10**9 * 5, before - 10**9 * 5))  # still after runtime.toml
    config.load()
    assert side.stat().st_mtime_ns == before - 10**9 * 5, "a fresh file is left alone"
    os.utime(conf)  # runtime.toml edited since: the file is stale
    config.load()
    assert int(side.stat().st_mtime) >= int(conf.stat().st_mtime)
    assert side.stat().st_mtime_ns > before - 10**9 * 5


def test_first_stage_file_only_for_the_runtimes_own_config(staged, tmp_path, monkeypatch):
    write, side = staged
    write("")
    other = tmp_path / "candidate.toml"
    other.write_text("")
    config.load(other)  # e.g. the role's `validate:` of a candidate file
    assert not side.exists()
    monkeypatch.setenv("GPUNODE_RUNTIME_FIRST_STAGE", "")
    config.load()
    assert not side.exists()


def test_first_stage_file_not_written_into_a_shared_directory(staged):
    write, side = staged
    write("")
    side.parent.mkdir(mode=0o777)
    side.parent.chmod(0o777)
    config.load()
    assert not side.exists()
    side.parent.chmod(0o755)
    config.load()
    assert side.exists()


def test_first_stage_file_not_for_values_it_cannot_hold(staged):
    write, side = staged
    write('runtimes = ["run\\nc"]\n')
    config.load()
    assert not side.exists()


def test_refresh_forces_the_first_stage_file(staged):
    write, side = staged
    write("")
    config.load()
    side.write_text("garbage\n")
    os.utime(side)  # fresh by its mtime, wrong by its content
    config.load(first_stage_force=True)  # what `gpunode runtime refresh` does
    assert side.read_text().startswith("gpunode-first-stage 1\n")


def test_first_stage_file_never_outlives_a_runtime_toml_changed_meanwhile(staged, monkeypatch):
    """runtime.toml replaced between its read and the file's write: no file is left that
    is newer than a runtime.toml it does not describe."""
    write, side = staged
    conf = write('runtimes = ["crun"]\n')
    from gpunode.util import files

    original = files.write_atomic

    def racing(path, data, *a, **kw):
        original(path, data, *a, **kw)
        if str(path) == str(side):  # lands after the read, before the check
            conf.write_text('runtimes = ["runc"]\n')

    monkeypatch.setattr(files, "write_atomic", racing)
    config.load()
    assert not side.exists()
