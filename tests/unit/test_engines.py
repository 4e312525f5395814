"""`gpunode runtime configure`: daemon.json and containerd config editing."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpunode import engines
from gpunode.engines import EngineConfigError, configure_containerd, configure_docker

RT = "/usr/local/bin/gpunode-container-runtime"
V2 = 'plugins."io.containerd.grpc.v1.cri"'


@pytest.fixture(autouse=True)
def no_real_dockerd(monkeypatch):
    """Never run the host's dockerd or containerd; tests that need them install a fake (or
    name the real containerd explicitly)."""
    monkeypatch.setattr(engines, "DOCKERD", "gpunode-test-no-such-dockerd")
    monkeypatch.setattr(engines, "CONTAINERD", "gpunode-test-no-such-containerd")


def read_json(p: Path) -> dict:
    return json.loads(p.read_text())


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


def test_docker_backup_keeps_the_operators_original(tmp_path):
    p = tmp_path / "daemon.json"
    original = '{"a": 1}'
    p.write_text(original)
    first = configure_docker(str(p))
    backup = Path(first.backup)
    assert backup.read_text() == original
    second = configure_docker(str(p), cdi=True)  # a second changing run
    third = configure_docker(str(p), set_default=True)  # and a third
    assert second.changed and third.changed
    assert second.backup == third.backup == str(backup)
    assert backup.read_text() == original  # never overwritten with gpunode's own output
    assert read_json(p)["features"] == {"cdi": True} and read_json(p)["default-runtime"]
    backup.unlink()  # the operator asks for a new backup
    r = configure_docker(str(p), runtime_name="other")
    assert Path(r.backup).read_text() == third.content


def test_containerd_main_backup_keeps_the_operators_original(tmp_path):
    main, conf_d = ctd(tmp_path, "version = 2\n# ops\n")
    first = configure_containerd(str(main), drop_in_dir=str(conf_d))
    main.write_text("version = 2\n# ops, edited\n")  # someone drops the imports line
    second = configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert second.changed and second.backup == first.backup
    assert Path(first.backup).read_text() == "version = 2\n# ops\n"


def dangling(tmp_path: Path, name: str) -> tuple[Path, Path]:
    link = tmp_path / "etc" / name
    link.parent.mkdir(exist_ok=True)
    target = tmp_path / "elsewhere" / "deep" / name
    link.symlink_to(target)
    return link, target


def test_docker_dangling_symlink_refused(tmp_path):
    link, target = dangling(tmp_path, "daemon.json")
    for dry_run in (False, True):
        with pytest.raises(EngineConfigError) as exc:
            configure_docker(str(link), dry_run=dry_run)
        msg = str(exc.value)
        assert "\n" not in msg
        assert msg.startswith(f"{link}: symbolic link to {target}, which does not exist")
        assert not (tmp_path / "elsewhere").exists()  # no directory made for the target
        assert link.is_symlink() and os.listdir(link.parent) == ["daemon.json"]


def test_containerd_dangling_symlinks_refused(tmp_path):
    link, target = dangling(tmp_path, "config.toml")
    conf_d = tmp_path / "etc" / "conf.d"
    with pytest.raises(EngineConfigError, match=f"^{link}: symbolic link to {target}, which"):
        configure_containerd(str(link), drop_in_dir=str(conf_d))
    link.unlink()
    conf_d.mkdir()
    (conf_d / "99-gpunode.toml").symlink_to(tmp_path / "elsewhere" / "drop" / "x.toml")
    with pytest.raises(EngineConfigError, match=f"^{conf_d}/99-gpunode.toml: symbolic link"):
        configure_containerd(str(link), drop_in_dir=str(conf_d))
    assert not (tmp_path / "elsewhere").exists() and not link.exists()


def test_docker_parent_is_a_dangling_symlink(tmp_path):
    etc = tmp_path / "etc"
    (etc).symlink_to(tmp_path / "elsewhere" / "etc")
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(etc / "docker" / "daemon.json"))
    assert str(exc.value).startswith(f"{etc}: symbolic link to {tmp_path}/elsewhere/etc, which")
    assert not (tmp_path / "elsewhere").exists()
    etc.unlink()
    etc.write_text("a file")
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(etc / "docker" / "daemon.json"))
    assert str(exc.value) == f"{etc}/docker: cannot create the directory (Not a directory)"


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


# ----------------------------------------------------------------- property: nothing is lost

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


# --------------------------------------------------------------------------- dockerd validation

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
    monkeypatch.setattr(engines, "DOCKERD", str(exe))
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


# --------------------------------------------------------------------------- containerd


def ctd(tmp_path: Path, body: str | None = None) -> tuple[Path, Path]:
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir(exist_ok=True)
    if body is not None:
        main.write_text(body)
    return main, tmp_path / "containerd" / "conf.d"


def load(p: Path) -> dict:
    return tomllib.loads(p.read_text())


def runtime(drop: dict, name: str = "gpunode", plugin: str = "io.containerd.grpc.v1.cri") -> dict:
    return drop["plugins"][plugin]["containerd"]["runtimes"][name]


@pytest.mark.parametrize("body", [None, "", "\n# just a comment\n"])
def test_containerd_missing_or_empty(tmp_path, body):
    main, conf_d = ctd(tmp_path, body)
    r = configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert r.changed
    data = load(main)
    assert data == {"version": 2, "imports": [f"{conf_d}/*.toml"]}
    assert main.read_text().startswith("version = 2\nimports = [")
    if body and body.strip():
        assert "# just a comment" in main.read_text()
    drop = load(conf_d / "99-gpunode.toml")
    assert drop["version"] == 2
    assert runtime(drop) == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": RT}}
    assert (
        f'[{V2}.containerd.runtimes.gpunode]\nruntime_type = "io.containerd.runc.v2"'
        in r.drop_in_content
    )
    assert f'[{V2}.containerd.runtimes.gpunode.options]\nBinaryName = "{RT}"' in r.drop_in_content
    assert (r.backup is None) == (body is None)
    assert stat.S_IMODE((conf_d / "99-gpunode.toml").stat().st_mode) == 0o644


MAIN_V2 = f"""# managed by ops
version = 2
imports = ["/etc/containerd/other/*.toml",  # keep me
]
root = "/var/lib/containerd"

[{V2}]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [{V2}.containerd]
    default_runtime_name = "runc"
  [{V2}.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [{V2}.containerd.runtimes.runc.options]
      SystemdCgroup = true

[plugins."io.containerd.internal.v1.opt"]
  path = "/opt/containerd"
"""


def test_containerd_existing_imports_appended_once_and_idempotent(tmp_path):
    main, conf_d = ctd(tmp_path, MAIN_V2)
    before = load(main)
    r = configure_containerd(str(main), drop_in_dir=str(conf_d), set_default=True, cdi=True)
    assert r.changed and Path(r.backup).read_text() == MAIN_V2
    after = load(main)
    assert after["imports"] == ["/etc/containerd/other/*.toml", f"{conf_d}/*.toml"]
    assert {k: v for k, v in after.items() if k != "imports"} == {
        k: v for k, v in before.items() if k != "imports"
    }
    text = main.read_text()
    assert "# managed by ops" in text and "# keep me" in text  # edited as text
    assert text.replace(f' "{conf_d}/*.toml"', "") == MAIN_V2

    drop = load(conf_d / "99-gpunode.toml")
    cri = drop["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["default_runtime_name"] == "gpunode"
    # the CRI section is carried over (containerd < 2.1 replaces plugin sections wholesale)
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"
    assert runtime(drop, "runc")["options"] == {"SystemdCgroup": True}
    # runc's options are inherited by the new runtime
    assert runtime(drop)["options"] == {"SystemdCgroup": True, "BinaryName": RT}
    assert "io.containerd.internal.v1.opt" not in drop["plugins"]

    mtimes = (main.stat().st_mtime_ns, (conf_d / "99-gpunode.toml").stat().st_mtime_ns)
    backup_mtime = Path(r.backup).stat().st_mtime_ns
    again = configure_containerd(str(main), drop_in_dir=str(conf_d), set_default=True, cdi=True)
    assert not again.changed and again.backup is None
    assert (main.stat().st_mtime_ns, (conf_d / "99-gpunode.toml").stat().st_mtime_ns) == mtimes
    assert Path(r.backup).stat().st_mtime_ns == backup_mtime
    assert load(main)["imports"].count(f"{conf_d}/*.toml") == 1
    # an earlier --set-default / --cdi is not taken back by a plain run
    assert not configure_containerd(str(main), drop_in_dir=str(conf_d)).changed


@pytest.mark.parametrize(
    ("imports_line", "expected_text"),
    [
        ("imports = []", 'imports = ["{g}"]'),
        ('imports = ["/a/*.toml"] # c', 'imports = ["/a/*.toml", "{g}"] # c'),
        ("imports = ['/a/*.toml',]", "imports = ['/a/*.toml', \"{g}\"]"),
        ('imports = [\n  "/a/#x.toml",\n  "/b]/*.toml"  # ] tricky\n]', None),
    ],
)
def test_containerd_imports_forms(tmp_path, imports_line, expected_text):
    main, conf_d = ctd(tmp_path, f"version = 2\n{imports_line}\n\n[plugins]\n")
    old_imports = load(main)["imports"]
    configure_containerd(str(main), drop_in_dir=str(conf_d))
    glob = f"{conf_d}/*.toml"
    assert load(main)["imports"] == [*old_imports, glob]
    if expected_text:
        assert expected_text.format(g=glob) in main.read_text()


def test_containerd_drop_in_already_imported_explicitly(tmp_path):
    conf_d = tmp_path / "containerd" / "conf.d"
    main, _ = ctd(tmp_path, f'version = 2\nimports = ["{conf_d}/99-gpunode.toml"]\n')
    r = configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert r.changed and r.backup is None  # only the drop-in was written
    assert load(main)["imports"] == [f"{conf_d}/99-gpunode.toml"]


def test_containerd_version_3(tmp_path):
    main, conf_d = ctd(tmp_path, "version = 3\n")
    r = configure_containerd(str(main), drop_in_dir=str(conf_d), cdi=True, set_default=True)
    assert load(main) == {"version": 3, "imports": [f"{conf_d}/*.toml"]}
    assert main.read_text() == f'version = 3\nimports = ["{conf_d}/*.toml"]\n'
    drop = load(conf_d / "99-gpunode.toml")
    assert drop["version"] == 3
    plugin = "io.containerd.cri.v1.runtime"
    assert runtime(drop, plugin=plugin)["options"]["BinaryName"] == RT
    assert drop["plugins"][plugin]["enable_cdi"] is True
    assert drop["plugins"][plugin]["containerd"]["default_runtime_name"] == "gpunode"
    assert (
        '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpunode]' in r.drop_in_content
    )


@pytest.mark.parametrize(
    "body",
    ["version = 1\n", '[plugins.cri]\n  sandbox_image = "x"\n', 'root = "/var/lib/containerd"\n'],
)
def test_containerd_version_1_rejected(tmp_path, body):
    main, conf_d = ctd(tmp_path, body)
    with pytest.raises(EngineConfigError) as exc:
        configure_containerd(str(main), drop_in_dir=str(conf_d))
    msg = str(exc.value)
    assert msg == (
        f"{main}: containerd config version 1 is not supported; "
        "migrate with `containerd config migrate`"
    )
    assert main.read_text() == body and not conf_d.exists()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("version = 2\nimports = [\n", "not valid TOML"),
        ('version = "2"\n', "'version' is not an integer"),
        ("version = 4\n", "version 4 is not supported"),
        ('version = 2\nimports = "/x"\n', "'imports' is not an array"),
        ('version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = 3\n', "is not a table"),
    ],
)
def test_containerd_bad_input_left_unchanged(tmp_path, body, fragment):
    main, conf_d = ctd(tmp_path, body)
    with pytest.raises(EngineConfigError) as exc:
        configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert fragment in str(exc.value) and "\n" not in str(exc.value)
    assert main.read_text() == body and os.listdir(main.parent) == ["config.toml"]


def test_containerd_dry_run(tmp_path):
    main, conf_d = ctd(tmp_path, "version = 2\n")
    r = configure_containerd(str(main), drop_in_dir=str(conf_d), dry_run=True)
    assert r.changed and r.dry_run and "imports" in r.content and "BinaryName" in r.drop_in_content
    assert main.read_text() == "version = 2\n" and not conf_d.exists()


def test_containerd_quoting(tmp_path):
    main, conf_d = ctd(tmp_path)
    path = '/opt/odd "dir"\\bin/rt\tx'
    r = configure_containerd(
        str(main), drop_in_dir=str(conf_d), runtime_name="gp.node", runtime_path=path
    )
    drop = tomllib.loads(r.drop_in_content)
    assert runtime(drop, "gp.node")["options"]["BinaryName"] == path
    assert '.containerd.runtimes."gp.node"]' in r.drop_in_content


def test_toml_dumps_round_trips():
    import datetime as dt

    data = {
        "a": 1,
        "b": [1, "x", {"k": True}],
        "t": {"f": 1.5e300, "s": "é\u0001\n", "d": dt.date(2024, 1, 2), "empty": {}},
        "weird key": {"x.y": {"z": False}},
    }
    assert tomllib.loads(engines.toml_dumps(data)) == data


def dump_with(main: Path) -> dict:
    proc = subprocess.run(
        ["containerd", "--config", str(main), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 or "version" not in proc.stdout:
        pytest.skip(f"containerd config dump unavailable: {proc.stderr.strip()[:200]}")
    return tomllib.loads(proc.stdout)


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd not installed")
@pytest.mark.parametrize("copy_from", ["containerd config dump", "main config"])
def test_containerd_really_loads_the_result(tmp_path, monkeypatch, copy_from):
    """containerd itself merges main + drop-in and keeps the operator's CRI settings, whether
    configure had containerd to merge with or (nothing else imported) copied the main config."""
    if copy_from == "containerd config dump":
        monkeypatch.setattr(engines, "CONTAINERD", "containerd")
    main, conf_d = ctd(tmp_path, MAIN_V2.replace('"/etc/containerd/other/*.toml",', ""))
    configure_containerd(str(main), drop_in_dir=str(conf_d), set_default=True)
    dumped = dump_with(main)
    cri = dumped["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"
    assert cri["containerd"]["default_runtime_name"] == "gpunode"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    gp = cri["containerd"]["runtimes"]["gpunode"]
    assert gp["runtime_type"] == "io.containerd.runc.v2"
    assert gp["options"]["BinaryName"] == RT and gp["options"]["SystemdCgroup"] is True
    assert copy_from in (conf_d / "99-gpunode.toml").read_text()


# ------------------------------------------------------- containerd: the merged CRI section

OPS_DROP_IN = f"""version = 2
[{V2}]
  sandbox_image = "example.org/pause:9"
  [{V2}.registry]
    config_path = "/etc/containerd/certs.d"
"""

# What containerd 1.6 dumps for MAIN_V2 plus OPS_DROP_IN (abridged): the imported file's
# CRI section replaced the main config's.
DUMP = f"""version = 2
root = "/var/lib/containerd"

[plugins]
  [{V2}]
    enable_cdi = false
    sandbox_image = "example.org/pause:9"
    [{V2}.containerd]
      default_runtime_name = "runc"
      [{V2}.containerd.runtimes]
        [{V2}.containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [{V2}.containerd.runtimes.runc.options]
            BinaryName = ""
            SystemdCgroup = false
    [{V2}.registry]
      config_path = "/etc/containerd/certs.d"
      [{V2}.registry.mirrors]
  [plugins."io.containerd.internal.v1.opt"]
    path = "/opt/containerd"
"""

FAKE_CONTAINERD = """#!/bin/sh
# fake containerd: `containerd --config FILE config dump`
echo "$@" >> "{log}"
cp "$2" "{given}"
{barrier}
if [ -n "$FAKE_CONTAINERD_FAIL" ]; then
  echo "time=x level=info msg=starting" >&2
  echo "containerd: failed to load TOML from $2: invalid plugin key" >&2
  exit 1
fi
cat "{dump}"
"""

# Both runs wait here (up to 3 s) for each other: without a lock both read the old file first.
BARRIER = """touch "{dir}/arrived.$$"; i=0
while [ "$(ls "{dir}" | grep -c '^arrived')" -lt 2 ] && [ $i -lt 30 ]; do
  sleep 0.1; i=$((i+1))
done"""


def fake_containerd(tmp_path: Path, monkeypatch=None, dump: str = DUMP, barrier="") -> Path:
    """A fake containerd in tmp_path/bin; returns the file where it copies the config given."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "dump.toml").write_text(dump)
    exe = bindir / "containerd"
    exe.write_text(
        FAKE_CONTAINERD.format(
            log=tmp_path / "containerd.log",
            given=tmp_path / "given.toml",
            dump=tmp_path / "dump.toml",
            barrier=barrier,
        )
    )
    exe.chmod(0o755)
    if monkeypatch is not None:
        monkeypatch.setattr(engines, "CONTAINERD", str(exe))
    return tmp_path / "given.toml"


@pytest.mark.parametrize("already_imported", [False, True])
def test_containerd_copy_comes_from_the_merged_configuration(
    tmp_path, monkeypatch, already_imported
):
    conf_d = tmp_path / "containerd" / "conf.d"
    body = MAIN_V2.replace(
        '"/etc/containerd/other/*.toml",', f'"{conf_d}/*.toml",' if already_imported else ""
    )
    main, _ = ctd(tmp_path, body)
    conf_d.mkdir()
    (conf_d / "50-ops.toml").write_text(OPS_DROP_IN)
    # a stale drop-in of an earlier run must not be where the copy comes from
    (conf_d / "99-gpunode.toml").write_text(f'version = 2\n[{V2}]\nsandbox_image = "stale"\n')
    given = fake_containerd(tmp_path, monkeypatch)

    r = configure_containerd(str(main), drop_in_dir=str(conf_d), set_default=True)
    drop = load(conf_d / "99-gpunode.toml")
    cri = drop["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "example.org/pause:9"  # from the other drop-in
    assert cri["registry"] == {"config_path": "/etc/containerd/certs.d", "mirrors": {}}
    assert cri["containerd"]["default_runtime_name"] == "gpunode"
    assert runtime(drop) == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": RT, "SystemdCgroup": False},  # runc as containerd runs it
    }
    assert list(drop["plugins"]) == ["io.containerd.grpc.v1.cri"]  # only the CRI section
    assert "# CRI section from: containerd config dump" in r.drop_in_content
    # containerd merged the main config and everything it imports after the run, but not
    # gpunode's own drop-in
    log = (tmp_path / "containerd.log").read_text().splitlines()
    assert len(log) == 1 and log[0].endswith(" config dump") and log[0].startswith("--config ")
    merged = tomllib.loads(given.read_text())
    assert merged["imports"] == [str(conf_d / "50-ops.toml")]
    assert {k: v for k, v in merged.items() if k != "imports"} == {
        k: v for k, v in tomllib.loads(body).items() if k != "imports"
    }
    assert load(main)["imports"] == [f"{conf_d}/*.toml"]
    assert not os.path.exists(log[0].split()[1])  # the temporary config is gone
    again = configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert not again.changed


def test_containerd_relative_imports_resolved_like_containerd(tmp_path, monkeypatch):
    main, conf_d = ctd(tmp_path, 'version = 2\nimports = ["ops.toml", "/abs/*.toml"]\n')
    given = fake_containerd(tmp_path, monkeypatch)
    configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert tomllib.loads(given.read_text())["imports"] == [
        str(main.parent / "ops.toml"),
        "/abs/*.toml",
    ]


def test_containerd_dump_failure_is_one_line(tmp_path, monkeypatch):
    main, conf_d = ctd(tmp_path, "version = 2\n")
    fake_containerd(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_CONTAINERD_FAIL", "1")
    with pytest.raises(EngineConfigError) as exc:
        configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert str(exc.value) == (
        f"{main}: `{tmp_path}/bin/containerd config dump` failed: containerd: failed to load "
        f"TOML from {main}: invalid plugin key; left unchanged"
    )
    assert main.read_text() == "version = 2\n" and not conf_d.exists()


def test_containerd_without_containerd_refuses_when_other_files_are_imported(tmp_path):
    main, conf_d = ctd(tmp_path, "version = 2\n")
    conf_d.mkdir()
    (conf_d / "50-ops.toml").write_text(OPS_DROP_IN)
    with pytest.raises(EngineConfigError) as exc:
        configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert str(exc.value) == (
        f"{main}: gpunode-test-no-such-containerd not found on PATH, needed to merge the CRI "
        f"settings of imported {conf_d}/50-ops.toml; install containerd first; left unchanged"
    )
    assert main.read_text() == "version = 2\n" and os.listdir(conf_d) == ["50-ops.toml"]


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd not installed")
def test_containerd_really_keeps_other_drop_ins(tmp_path, monkeypatch):
    """With this machine's containerd: settings of another drop-in survive configure."""
    monkeypatch.setattr(engines, "CONTAINERD", "containerd")
    conf_d = tmp_path / "containerd" / "conf.d"
    main, _ = ctd(tmp_path, MAIN_V2.replace('"/etc/containerd/other/*.toml"', f'"{conf_d}/*.toml"'))
    conf_d.mkdir()
    (conf_d / "50-ops.toml").write_text(OPS_DROP_IN)
    before = dump_with(main)["plugins"]["io.containerd.grpc.v1.cri"]
    assert before["sandbox_image"] == "example.org/pause:9"  # the setup means something
    configure_containerd(str(main), drop_in_dir=str(conf_d), set_default=True)
    after = dump_with(main)["plugins"]["io.containerd.grpc.v1.cri"]
    assert after["sandbox_image"] == "example.org/pause:9"
    assert after["registry"]["config_path"] == "/etc/containerd/certs.d"
    gp = after["containerd"]["runtimes"].pop("gpunode")
    assert gp["options"]["BinaryName"] == RT and gp["runtime_type"] == "io.containerd.runc.v2"
    assert after["containerd"].pop("default_runtime_name") == "gpunode"
    before["containerd"].pop("default_runtime_name")
    assert after == before  # nothing else in the CRI section changed


# ------------------------------------------------------------------ concurrent runs, locked

FAKE_DOCKERD_SLOW = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Docker version 26.1.5, build 411e817"; exit 0; fi
{barrier}
exit 0
"""


@pytest.mark.parametrize("engine", ["docker", "containerd"])
def test_concurrent_runs_keep_both_changes(tmp_path, engine):
    """Two real `gpunode runtime configure` processes, one --set-as-default, one --cdi: both
    read the file, then (without the lock) wait for each other in dockerd --validate or
    containerd config dump, so the second replace would drop the first's change."""
    barrier = BARRIER.format(dir=tmp_path / "barrier")
    (tmp_path / "barrier").mkdir()
    if engine == "docker":
        exe = tmp_path / "bin" / "dockerd"
        exe.parent.mkdir()
        exe.write_text(FAKE_DOCKERD_SLOW.format(barrier=barrier))
        exe.chmod(0o755)
        config = tmp_path / "daemon.json"
        config.write_text('{"log-driver": "journald"}\n')
        extra = []
    else:
        fake_containerd(tmp_path, dump=DUMP, barrier=barrier)
        config, conf_d = ctd(tmp_path, "version = 2\n")
        extra = ["--drop-in-dir", str(conf_d)]
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    cli = [sys.executable, "-m", "gpunode.cli", "runtime", "configure", engine]
    cli += ["--config", str(config), *extra]
    runs = [
        subprocess.Popen([*cli, flag], env=env, stderr=subprocess.PIPE, text=True)
        for flag in ("--set-as-default", "--cdi")
    ]
    for proc in runs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert len(os.listdir(tmp_path / "barrier")) == 2  # both really got to the slow step
    if engine == "docker":
        data = read_json(config)
        assert data["default-runtime"] == "gpunode" and data["features"] == {"cdi": True}
        assert data["log-driver"] == "journald"
        assert sorted(os.listdir(tmp_path)) == sorted(
            ["barrier", "bin", "daemon.json", "daemon.json.gpunode-backup"]
        )  # no lock file left behind
    else:
        cri = load(conf_d / "99-gpunode.toml")["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["containerd"]["default_runtime_name"] == "gpunode"
        assert cri["enable_cdi"] is True
        assert not (config.parent / "config.toml.gpunode-lock").exists()
