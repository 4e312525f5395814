"""`gpunode runtime configure containerd`: the drop-in with containerd's merged CRI section,
`imports` edited as text, the TOML writer."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from gpunode.engines import containerd
from gpunode.engines.common import EngineConfigError
from gpunode.engines.containerd import configure_containerd

from .fakes import RT, V2, ctd, fake_containerd, load, runtime


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
    assert tomllib.loads(containerd.toml_dumps(data)) == data


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
        monkeypatch.setattr(containerd, "CONTAINERD", "containerd")
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


OPS_DROP_IN = f"""version = 2
[{V2}]
  sandbox_image = "example.org/pause:9"
  [{V2}.registry]
    config_path = "/etc/containerd/certs.d"
"""


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
    monkeypatch.setattr(containerd, "CONTAINERD", "containerd")
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
