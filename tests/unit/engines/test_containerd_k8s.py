"""`gpunode runtime configure containerd` for Kubernetes nodes (issue 19): several handler
names in one drop-in, runc kept, CDI refused below containerd 1.7, cdi_spec_dirs,
container_annotations, config versions 2 and 3, other drop-ins kept, dry-run diffs."""

from __future__ import annotations

import os
import shutil

import pytest

from gpunode.cli import main as cli
from gpunode.engines import containerd
from gpunode.engines.common import EngineConfigError
from gpunode.engines.containerd import CRI_PLUGINS, configure_containerd

from .fakes import DUMP, RT, ctd, fake_containerd, load, runtime
from .test_containerd import MAIN_V2, OPS_DROP_IN, dump_with

V2_PLUGIN = "io.containerd.grpc.v1.cri"
V3_PLUGIN = "io.containerd.cri.v1.runtime"
DROP = "99-gpunode.toml"


def cri_of(drop: dict, plugin: str = V2_PLUGIN) -> dict:
    return drop["plugins"][plugin]


@pytest.mark.parametrize(("version", "plugin"), [(2, V2_PLUGIN), (3, V3_PLUGIN)])
def test_several_names_in_one_drop_in_and_idempotent(tmp_path, version, plugin):
    main, conf_d = ctd(tmp_path, f"version = {version}\n")
    kw = {"drop_in_dir": str(conf_d), "names": ["gpunode", "nvidia"], "set_default": True}
    r = configure_containerd(str(main), **kw)
    assert r.changed
    drop = load(conf_d / DROP)
    assert drop["version"] == version
    for name in ("gpunode", "nvidia"):
        entry = runtime(drop, name, plugin)
        assert entry == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": RT}}
    # runc stays declared, so pods without a RuntimeClass keep a runtime
    assert runtime(drop, "runc", plugin) == {"runtime_type": "io.containerd.runc.v2"}
    assert cri_of(drop, plugin)["containerd"]["default_runtime_name"] == "gpunode"
    mtime = (conf_d / DROP).stat().st_mtime_ns
    again = configure_containerd(str(main), **kw)
    assert not again.changed and (conf_d / DROP).stat().st_mtime_ns == mtime
    # a run without --set-as-default keeps the default an earlier run set
    assert not configure_containerd(
        str(main), drop_in_dir=str(conf_d), names=["gpunode", "nvidia"]
    ).changed


def test_names_inherit_runc_options_and_site_runtimes_are_kept(tmp_path):
    main, conf_d = ctd(tmp_path, MAIN_V2.replace('"/etc/containerd/other/*.toml",', ""))
    configure_containerd(str(main), drop_in_dir=str(conf_d), names=["gpunode", "nvidia"])
    drop = load(conf_d / DROP)
    for name in ("gpunode", "nvidia"):
        assert runtime(drop, name)["options"] == {"SystemdCgroup": True, "BinaryName": RT}
    assert runtime(drop, "runc")["options"] == {"SystemdCgroup": True}  # not replaced
    assert cri_of(drop)["containerd"]["default_runtime_name"] == "runc"


def test_old_default_dropped_with_its_name(tmp_path):
    """A default an earlier run set is kept only while that name is still registered
    (containerd refuses a default_runtime_name without runtime)."""
    main, conf_d = ctd(tmp_path, "version = 2\n")
    configure_containerd(str(main), drop_in_dir=str(conf_d), names=["nvidia"], set_default=True)
    configure_containerd(str(main), drop_in_dir=str(conf_d), names=["gpunode"])
    drop = load(conf_d / DROP)
    assert "default_runtime_name" not in cri_of(drop)["containerd"]
    assert set(cri_of(drop)["containerd"]["runtimes"]) == {"runc", "gpunode"}


@pytest.mark.parametrize(("version", "plugin"), [(2, V2_PLUGIN), (3, V3_PLUGIN)])
def test_container_annotations_added_to_gpunode_handlers_only(tmp_path, version, plugin):
    body = f"""version = {version}
[plugins."{plugin}".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  container_annotations = ["io.example/*"]
[plugins."{plugin}".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  container_annotations = ["io.site/*", "cdi.k8s.io/*"]
"""
    main, conf_d = ctd(tmp_path, body)
    kw = {
        "drop_in_dir": str(conf_d),
        "names": ["gpunode", "nvidia"],
        "container_annotations": containerd.annotation_patterns(["cdi.k8s.io/", "x.io/k"]),
    }
    assert configure_containerd(str(main), **kw).changed
    drop = load(conf_d / DROP)
    # a new handler starts as a copy of runc (with its patterns)
    assert runtime(drop, "gpunode", plugin)["container_annotations"] == [
        "io.example/*",
        "cdi.k8s.io/*",
        "x.io/k*",
    ]
    # the site's patterns kept, in their order, ours appended once
    assert runtime(drop, "nvidia", plugin)["container_annotations"] == [
        "io.site/*",
        "cdi.k8s.io/*",
        "x.io/k*",
    ]
    assert runtime(drop, "runc", plugin)["container_annotations"] == ["io.example/*"]
    assert not configure_containerd(str(main), **kw).changed


def test_annotation_patterns():
    assert containerd.annotation_patterns(["cdi.k8s.io/", "a/*"]) == ("cdi.k8s.io/*", "a/*")


@pytest.mark.parametrize(
    ("main_version", "dump_version", "plugin"),
    [
        (2, 2, V2_PLUGIN),  # containerd 1.x
        (3, 3, V3_PLUGIN),  # containerd 2.x with a config of its own layout
        (2, 3, V2_PLUGIN),  # containerd 2.x with Debian's version 2 config.toml
    ],
)
def test_cdi_and_spec_dirs_in_the_cri_section_of_each_layout(
    tmp_path, monkeypatch, main_version, dump_version, plugin
):
    v2 = 'plugins."io.containerd.grpc.v1.cri"'
    dump = DUMP.replace("version = 2", f"version = {dump_version}")
    dump = dump.replace(v2, f'plugins."{CRI_PLUGINS[dump_version]}"')
    dump = dump.replace(
        "enable_cdi = false", 'enable_cdi = false\n    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]'
    ).replace("SystemdCgroup = false", "SystemdCgroup = true")  # the site's runc option
    fake_containerd(tmp_path, monkeypatch, dump=dump)
    main, conf_d = ctd(tmp_path, f"version = {main_version}\n")
    kw = {"drop_in_dir": str(conf_d), "cdi": True, "cdi_spec_dirs": ["/srv/cdi", "/etc/cdi"]}
    assert configure_containerd(str(main), **kw).changed
    drop = load(conf_d / DROP)
    # the drop-in in the main config's version: containerd 2.x migrates the merged files as
    # one config of the highest version, so a newer drop-in would hide the main config's keys
    assert drop["version"] == main_version and list(drop["plugins"]) == [plugin], drop
    cri = cri_of(drop, plugin)
    assert cri["enable_cdi"] is True
    assert cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi", "/srv/cdi"]  # containerd's kept
    assert runtime(drop, "gpunode", plugin)["options"]["SystemdCgroup"] is True  # runc's copied
    if dump_version == 2:  # containerd < 2.0 replaces plugin sections: the rest copied
        assert cri["sandbox_image"] == "example.org/pause:9"
    else:  # containerd 2.x merges them: gpunode's keys only
        assert set(cri) == {"enable_cdi", "cdi_spec_dirs", "containerd"}, cri
        assert set(cri["containerd"]) == {"runtimes"}, cri
    assert not configure_containerd(str(main), **kw).changed


@pytest.mark.parametrize(
    ("version", "refused"),
    [("1.6.20~ds1", True), ("1.6.99", True), ("1.7.0", False), ("1.7.24~ds1", False)],
)
def test_cdi_refused_below_containerd_1_7(tmp_path, monkeypatch, version, refused):
    fake_containerd(tmp_path, monkeypatch, version=version)
    main, conf_d = ctd(tmp_path, "version = 2\n")
    if not refused:
        assert configure_containerd(str(main), drop_in_dir=str(conf_d), cdi=True).changed
        return
    with pytest.raises(EngineConfigError) as exc:
        configure_containerd(str(main), drop_in_dir=str(conf_d), cdi=True)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{main}: containerd {version.split('~')[0]} has no CDI")
    assert "needs containerd >= 1.7.0" in msg and msg.endswith("left unchanged")
    assert main.read_text() == "version = 2\n" and not conf_d.exists()
    # without --cdi the same containerd is fine
    assert configure_containerd(str(main), drop_in_dir=str(conf_d)).changed


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"names": ["gpunode", "runc"]}, "runtime name 'runc' would replace containerd's runc"),
        ({"names": ["gpunode", ""]}, "runtime name and path must not be empty"),
        ({"cdi_spec_dirs": ["cdi"]}, "CDI spec directory 'cdi' is not absolute"),
        ({"container_annotations": ["a*b"]}, "annotation pattern 'a*b' is not accepted"),
        ({"container_annotations": [""]}, "annotation pattern '' is not accepted"),
    ],
)
def test_bad_options_are_one_line_and_nothing_written(tmp_path, kw, fragment):
    main, conf_d = ctd(tmp_path, "version = 2\n")
    with pytest.raises(EngineConfigError) as exc:
        configure_containerd(str(main), drop_in_dir=str(conf_d), **kw)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)
    assert main.read_text() == "version = 2\n" and not conf_d.exists()


def test_duplicate_names_registered_once(tmp_path):
    main, conf_d = ctd(tmp_path, "version = 2\n")
    configure_containerd(str(main), drop_in_dir=str(conf_d), names=["nvidia", "nvidia"])
    assert set(cri_of(load(conf_d / DROP))["containerd"]["runtimes"]) == {"runc", "nvidia"}


def test_cli_names_annotations_and_dry_run_diff(tmp_path, capsys, monkeypatch):
    rt = tmp_path / "runtime.toml"
    rt.write_text('annotation-prefixes = ["cdi.k8s.io/", "example.com/gpu"]\n')
    main, conf_d = ctd(tmp_path, "version = 2\n")
    base = ["runtime", "configure", "containerd", "--config", str(main)]
    base += ["--drop-in-dir", str(conf_d), "--name", "gpunode", "--name", "nvidia"]
    base += ["--pass-annotations", "--runtime-config", str(rt)]
    assert cli.main([*base, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--- {main} (before)\n+++ {main} (after)\n" in out
    assert f'+imports = ["{conf_d}/*.toml"]' in out
    assert f"--- /dev/null\n+++ {conf_d}/{DROP} (after)\n" in out
    assert '+container_annotations = ["cdi.k8s.io/*", "example.com/gpu*"]' in out
    assert out.count("container_annotations") == 2  # gpunode and nvidia, not runc
    assert main.read_text() == "version = 2\n" and not conf_d.exists()  # dry run
    assert cli.main(base) == 0
    capsys.readouterr()
    assert cli.main([*base, "--dry-run"]) == 0
    assert capsys.readouterr().out == ""  # nothing would change: no diff


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["docker", "--name", "a", "--name", "b"], "--name given twice is for containerd only"),
        (["docker", "--pass-annotations"], "--pass-annotations is for containerd only"),
        (["containerd", "--cdi-spec-dir", "/srv/cdi"], "--cdi-spec-dir needs --cdi"),
    ],
)
def test_cli_bad_combinations(tmp_path, capsys, extra, fragment):
    cfg = tmp_path / "cfg"
    assert cli.main(["runtime", "configure", *extra, "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]
    assert not cfg.exists()


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd not installed")
def test_really_loads_two_handlers_with_annotations_and_keeps_other_drop_ins(tmp_path, monkeypatch):
    """This machine's containerd merges main + other drop-in + ours: both handlers, their
    annotations, runc and the other drop-in's settings."""
    monkeypatch.setattr(containerd, "CONTAINERD", "containerd")
    conf_d = tmp_path / "containerd" / "conf.d"
    main, _ = ctd(tmp_path, MAIN_V2.replace('"/etc/containerd/other/*.toml"', f'"{conf_d}/*.toml"'))
    conf_d.mkdir()
    (conf_d / "50-ops.toml").write_text(OPS_DROP_IN)
    configure_containerd(
        str(main),
        drop_in_dir=str(conf_d),
        names=["gpunode", "nvidia"],
        container_annotations=["cdi.k8s.io/*"],
        set_default=True,
    )
    cri = dump_with(main)["plugins"][V2_PLUGIN]
    assert cri["sandbox_image"] == "example.org/pause:9"
    assert cri["containerd"]["default_runtime_name"] == "gpunode"
    runtimes = cri["containerd"]["runtimes"]
    for name in ("gpunode", "nvidia"):
        assert runtimes[name]["options"]["BinaryName"] == RT
        assert runtimes[name]["container_annotations"] == ["cdi.k8s.io/*"]
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert sorted(os.listdir(conf_d)) == ["50-ops.toml", DROP]


def test_cli_says_containerd_must_be_restarted(tmp_path, capsys):
    """containerd reads its configuration only when it starts (issue 25 item 6): a run that
    changed it says so on stderr and as restart_needed; a run that changed nothing, and a
    dry run, do not."""
    import json

    main, conf_d = ctd(tmp_path, "version = 2\n")
    base = ["runtime", "configure", "containerd", "--config", str(main)]
    base += ["--drop-in-dir", str(conf_d), "--name", "nvidia", "--name", "gpunode"]
    assert cli.main([*base, "--dry-run", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["restart_needed"] is False and out.err == ""
    assert cli.main(base) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"{main}: changed")
    assert out.err.splitlines() == [
        "restart needed: containerd loads its configuration only when it starts; until "
        "`systemctl restart containerd`, pods through handler 'nvidia', handler 'gpunode' "
        'fail with `no runtime for "nvidia" is configured`'
    ]
    assert cli.main([*base, "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["restart_needed"] is False and out.err == ""
    main.write_text("version = 2\n")
    for f in conf_d.iterdir():
        f.unlink()
    assert cli.main([*base, "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["changed"] is True and doc["restart_needed"] is True
    assert out.err.startswith("restart needed: containerd")
