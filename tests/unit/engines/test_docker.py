"""`gpunode runtime configure docker`: daemon.json merged, every other key kept, validated."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpunode.engines import docker
from gpunode.engines.common import EngineConfigError
from gpunode.engines.docker import configure_docker

from .fakes import RT, read_json

# --------------------------------------------------------------------------- docker


def test_docker_fresh_file_creates_parent(tmp_path):
    p = tmp_path / "etc" / "docker" / "daemon.json"
    r = configure_docker(str(p))
    assert r.changed and r.backup is None and r.validated is None
    assert read_json(p) == {"runtimes": {"gpunode": {"path": RT}}}
    assert p.read_text() == r.content and r.content.endswith("}\n")
    assert '\n    "runtimes": {\n        "gpunode"' in r.content  # 4-space indent
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert not (tmp_path / "etc" / "docker" / "daemon.json.gpunode-backup").exists()
    assert r.to_dict()["changed"] is True
    json.dumps(r.to_dict())


@pytest.mark.parametrize("body", ["", "   \n\t\n"])
def test_docker_empty_file(tmp_path, body):
    p = tmp_path / "daemon.json"
    p.write_text(body)
    r = configure_docker(str(p))
    assert r.changed
    assert read_json(p) == {"runtimes": {"gpunode": {"path": RT}}}
    assert Path(r.backup).read_text() == body


EXISTING = {
    "log-driver": "json-file",
    "log-opts": {"max-size": "10m", "max-file": "3", "labels": ["a", "b"]},
    "features": {"buildkit": True},
    "runtimes": {
        "nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []},
        "gpunode": {"path": "/old/path", "runtimeArgs": ["--debug"]},
    },
    "default-runtime": "runc",
    "data-root": "/var/lib/docker",
}


def test_docker_existing_keys_kept_features_merged(tmp_path):
    p = tmp_path / "daemon.json"
    original = json.dumps(EXISTING, indent=2)
    p.write_text(original)
    os.chmod(p, 0o600)
    r = configure_docker(str(p), cdi=True)
    new = read_json(p)
    assert new["log-opts"] == EXISTING["log-opts"]
    assert new["features"] == {"buildkit": True, "cdi": True}
    assert new["runtimes"]["nvidia"] == EXISTING["runtimes"]["nvidia"]
    assert new["runtimes"]["gpunode"] == {"path": RT, "runtimeArgs": ["--debug"]}
    assert new["default-runtime"] == "runc"  # not set_default: left alone
    assert list(new) == list(EXISTING)  # operator's key order, not sorted
    assert stat.S_IMODE(p.stat().st_mode) == 0o600  # mode kept
    assert r.backup == str(p) + ".gpunode-backup"
    assert Path(r.backup).read_text() == original


def test_docker_new_keys_appended_in_order(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_text('{"zeta": 1, "alpha": 2}')
    configure_docker(str(p), set_default=True, cdi=True)
    assert list(read_json(p)) == ["zeta", "alpha", "runtimes", "default-runtime", "features"]


def test_docker_set_default_and_cdi(tmp_path):
    p = tmp_path / "daemon.json"
    r = configure_docker(
        str(p), runtime_name="gp", runtime_path="/x/rt", set_default=True, cdi=True
    )
    assert read_json(p) == {
        "runtimes": {"gp": {"path": "/x/rt"}},
        "default-runtime": "gp",
        "features": {"cdi": True},
    }
    assert r.changed


def test_docker_idempotent(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_text(json.dumps(EXISTING))
    first = configure_docker(str(p), set_default=True, cdi=True)
    assert first.changed
    backup = Path(first.backup)
    before = (p.stat().st_mtime_ns, p.stat().st_ino, backup.stat().st_mtime_ns)
    backup_text = backup.read_text()
    second = configure_docker(str(p), set_default=True, cdi=True)
    assert not second.changed and second.backup is None
    assert second.content == p.read_text()
    assert (p.stat().st_mtime_ns, p.stat().st_ino, backup.stat().st_mtime_ns) == before
    assert backup.read_text() == backup_text
    # without the flags, nothing is taken back either
    assert not configure_docker(str(p)).changed


def test_docker_semantically_equal_file_not_rewritten(tmp_path):
    p = tmp_path / "daemon.json"
    text = json.dumps({"runtimes": {"gpunode": {"path": RT}}, "features": {"cdi": True}})
    p.write_text(text)
    r = configure_docker(str(p), cdi=True)
    assert not r.changed and p.read_text() == text


def test_docker_true_is_not_one(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_text(json.dumps({"runtimes": {"gpunode": {"path": RT}}, "features": {"cdi": 1}}))
    assert configure_docker(str(p), cdi=True).changed
    assert read_json(p)["features"]["cdi"] is True


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('{"log-driver": "json-file",\n  "runtimes": {\n}', "line 3 column 2"),
        ('{"a": 1,}', "line 1 column 9"),
        ("\ufeff{}", "not valid JSON"),
    ],
)
def test_docker_invalid_json(tmp_path, body, fragment):
    p = tmp_path / "daemon.json"
    p.write_text(body)
    raw = p.read_bytes()
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(p))
    msg = str(exc.value)
    assert "\n" not in msg and str(p) in msg and "not valid JSON" in msg and fragment in msg
    assert "left unchanged" in msg
    assert p.read_bytes() == raw
    assert os.listdir(tmp_path) == ["daemon.json"]


@pytest.mark.parametrize(
    ("body", "kind"), [("[1, 2]", "array"), ('"x"', "string"), ("3", "number")]
)
def test_docker_top_level_not_object(tmp_path, body, kind):
    p = tmp_path / "daemon.json"
    p.write_text(body)
    with pytest.raises(EngineConfigError, match=f"{p}.*top level is an? {kind}, not an object"):
        configure_docker(str(p))
    assert p.read_text() == body
    assert os.listdir(tmp_path) == ["daemon.json"]


@pytest.mark.parametrize(
    ("config", "kwargs", "key"),
    [
        ({"runtimes": "nvidia"}, {}, "'runtimes'"),
        ({"runtimes": {"gpunode": "/x"}}, {}, "'runtimes.gpunode'"),
        ({"features": ["cdi"]}, {"cdi": True}, "'features'"),
    ],
)
def test_docker_wrong_types(tmp_path, config, kwargs, key):
    p = tmp_path / "daemon.json"
    p.write_text(json.dumps(config))
    raw = p.read_bytes()
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(p), **kwargs)
    assert key in str(exc.value) and str(p) in str(exc.value)
    assert p.read_bytes() == raw and os.listdir(tmp_path) == ["daemon.json"]


def test_docker_features_not_object_ignored_without_cdi(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_text('{"features": "odd"}')
    configure_docker(str(p))
    assert read_json(p)["features"] == "odd"


def test_docker_dry_run_writes_nothing(tmp_path):
    missing = tmp_path / "sub" / "daemon.json"
    r = configure_docker(str(missing), dry_run=True, cdi=True)
    assert r.changed and r.dry_run and r.backup is None
    assert json.loads(r.content)["features"] == {"cdi": True}
    assert not missing.parent.exists()
    p = tmp_path / "daemon.json"
    p.write_text('{"a": 1}')
    r = configure_docker(str(p), dry_run=True)
    assert r.changed and p.read_text() == '{"a": 1}'
    assert os.listdir(tmp_path) == ["daemon.json"]


def test_docker_symlinked_config_keeps_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "daemon.json"
    link.symlink_to(target)
    configure_docker(str(link))
    assert link.is_symlink() and read_json(target)["runtimes"]["gpunode"]["path"] == RT


def test_docker_unicode_kept(tmp_path):
    p = tmp_path / "daemon.json"
    p.write_text('{"labels": ["zone=Zürich"]}', encoding="utf-8")
    r = configure_docker(str(p))
    assert "Zürich" in r.content and read_json(p)["labels"] == ["zone=Zürich"]


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)

json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)

SPECIAL = {"runtimes", "features", "default-runtime"}

base_configs = st.dictionaries(
    st.text(max_size=10).filter(lambda k: k not in SPECIAL), json_values, max_size=6
)


@st.composite
def daemon_configs(draw):
    config = draw(base_configs)
    if draw(st.booleans()):
        config["features"] = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=3))
    if draw(st.booleans()):
        config["runtimes"] = draw(
            st.dictionaries(
                st.text(max_size=8),
                st.dictionaries(st.text(max_size=8), json_values, max_size=3),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        config["default-runtime"] = draw(st.text(max_size=8))
    return config


def leaf_paths(obj, prefix=()):
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from leaf_paths(v, (*prefix, k))
    else:
        yield prefix, obj


def lookup(obj, path):
    for k in path:
        obj = obj[k]
    return obj


@settings(max_examples=150, deadline=None)
@given(
    config=daemon_configs(),
    name=st.text(min_size=1, max_size=8),
    set_default=st.booleans(),
    cdi=st.booleans(),
)
def test_docker_property_every_key_path_kept(config, name, set_default, cdi):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "daemon.json"
        original = json.dumps(config, indent=2)
        p.write_text(original)
        configure_docker(str(p), runtime_name=name, set_default=set_default, cdi=cdi)
        new = read_json(p)
        for path, value in leaf_paths(config):
            if path[:2] == ("runtimes", name) or (path == ("features", "cdi") and cdi):
                continue
            if path == ("default-runtime",) and set_default:
                continue
            if value == {} and path in {(), ("runtimes",), ("features",)}:
                assert isinstance(lookup(new, path), dict)  # may have gained our keys
                continue
            assert json.dumps(lookup(new, path)) == json.dumps(value), path
        assert new["runtimes"][name]["path"] == RT
        if set_default:
            assert new["default-runtime"] == name
        if cdi:
            assert new["features"]["cdi"] is True
        extra = (set(new) - set(config)) - SPECIAL
        assert not extra
        assert not configure_docker(
            str(p), runtime_name=name, set_default=set_default, cdi=cdi
        ).changed
        if Path(d, "daemon.json.gpunode-backup").exists():
            assert Path(d, "daemon.json.gpunode-backup").read_text() == original


FAKE_DOCKERD = """#!/bin/sh
echo "$@" >> "{log}"
if [ "$1" = "--version" ]; then echo "Docker version {version}, build 411e817"; exit 0; fi
if [ "$1" = "--validate" ]; then
  if grep -q bogus "$3"; then
    echo "unable to configure the Docker daemon with file $3:" \\
      "the following directives don't match any configuration option: bogus" >&2
    exit 1
  fi
  echo "configuration OK"
  exit 0
fi
exit 2
"""


def fake_dockerd(tmp_path: Path, monkeypatch, version: str) -> Path:
    log = tmp_path / "dockerd.log"
    exe = tmp_path / "bin" / "dockerd"
    exe.parent.mkdir()
    exe.write_text(FAKE_DOCKERD.format(log=log, version=version))
    exe.chmod(0o755)
    monkeypatch.setattr(docker, "DOCKERD", str(exe))
    return log


def test_validate_ok(tmp_path, monkeypatch):
    log = fake_dockerd(tmp_path, monkeypatch, "26.1.5")
    etc = tmp_path / "etc"
    etc.mkdir()
    p = etc / "daemon.json"
    r = configure_docker(str(p))
    assert r.validated == "dockerd --validate: ok"
    calls = log.read_text().splitlines()
    assert calls[0] == "--version" and calls[1].startswith("--validate --config-file ")
    tmp_file = calls[1].split()[-1]
    assert os.path.dirname(tmp_file) == str(etc) and not os.path.exists(tmp_file)
    assert read_json(p)["runtimes"]["gpunode"]["path"] == RT


def test_validate_failure_leaves_file_unchanged(tmp_path, monkeypatch):
    fake_dockerd(tmp_path, monkeypatch, "26.1.5")
    etc = tmp_path / "etc"
    etc.mkdir()
    p = etc / "daemon.json"
    p.write_text('{"bogus": true}\n')
    raw = p.read_bytes()
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(p))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{p}: dockerd --validate rejected")
    assert "don't match any configuration option: bogus" in msg
    assert p.read_bytes() == raw
    assert os.listdir(etc) == ["daemon.json"]  # no temp file, no backup


def test_validate_skipped_when_disabled(tmp_path, monkeypatch):
    log = fake_dockerd(tmp_path, monkeypatch, "26.1.5")
    p = tmp_path / "daemon.json"
    p.write_text('{"bogus": true}')
    r = configure_docker(str(p), validate=False)
    assert r.changed and r.validated is None and not log.exists()


@pytest.mark.parametrize("version", ["20.10.24+dfsg1", "garbled"])
def test_validate_not_called_on_old_dockerd(tmp_path, monkeypatch, version):
    log = fake_dockerd(tmp_path, monkeypatch, version)
    p = tmp_path / "daemon.json"
    p.write_text('{"bogus": true}')
    r = configure_docker(str(p))
    assert r.changed and r.validated is None
    assert log.read_text().splitlines() == ["--version"]


def test_validate_not_called_when_unchanged_or_dry_run(tmp_path, monkeypatch):
    p = tmp_path / "daemon.json"
    configure_docker(str(p))
    log = fake_dockerd(tmp_path, monkeypatch, "26.1.5")
    assert configure_docker(str(p)).validated is None
    assert configure_docker(str(p), cdi=True, dry_run=True).validated is None
    assert not log.exists()
