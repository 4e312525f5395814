"""`gpunode runtime setup`: the gpu_container_runtime role's whole file work in one run.

The node is a temporary directory (runtime.toml, daemon.json, containerd's config, the CDI
spec dir, a unit dir); systemctl is a fake script that keeps unit state in files and logs
every call; discovery is the CLI tests' fake node (one T4)."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from gpunode.cli import main as cli
from gpunode.engines import containerd, docker, runtime_setup
from gpunode.runtime import discovery

RT = "/usr/local/bin/gpunode-container-runtime"
SERVICE = "[Unit]\nDescription=refresh\n\n[Service]\nType=oneshot\nExecStart=/bin/true\n"
PATH_UNIT = "[Path]\nPathChanged=/var/lib/dpkg/status\n"

FAKE_SYSTEMCTL = """#!/bin/sh
# fake systemctl: unit state in {state}/<what>.<unit>, every call logged
echo "$*" >> "{log}"
[ -n "$FAKE_SYSTEMCTL_FAIL" ] && [ "$1" = "$FAKE_SYSTEMCTL_FAIL" ] && {{
  echo "Failed to $1 unit: Access denied" >&2; exit 1; }}
case "$1" in
  is-enabled) if [ -e "{state}/enabled.$2" ]; then echo enabled; exit 0; fi
              echo disabled; exit 1 ;;
  is-active) if [ -e "{state}/active.$2" ]; then echo active; exit 0; fi
             echo inactive; exit 3 ;;
  show) if [ -e "{state}/stale.$4" ]; then echo yes; else echo no; fi ;;
  enable) touch "{state}/enabled.$2" ;;
  start) touch "{state}/active.$2" ;;
  stop) rm -f "{state}/active.$2" ;;
  disable) rm -f "{state}/enabled.$2" ;;
  daemon-reload) rm -f "{state}"/stale.* ;;
esac
exit 0
"""


class Node:
    """Paths of the temporary node, the fake systemctl's log and state."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "etc/gpunode/runtime.toml"
        self.daemon_json = root / "etc/docker/daemon.json"
        self.containerd = root / "etc/containerd/config.toml"
        self.drop_in_dir = root / "etc/containerd/conf.d"
        self.cdi_dir = root / "etc/cdi"
        self.cache = root / "var/cache/gpunode/inventory.json"
        self.unit_dir = root / "etc/systemd/system"
        self.state = root / "systemd-state"
        self.log = root / "systemctl.log"
        self.dev_root = str(root)
        self.discoveries: list[dict] = []
        self.state.mkdir(parents=True)

    def settings(self, **extra: str) -> str:
        """runtime.toml as the role renders it (its template: a comment, sorted keys)."""
        keys = {
            "cache-file": str(self.cache),
            "cdi-spec-dirs": [str(self.cdi_dir)],
            "dev-root": self.dev_root,
            **extra,
        }
        lines = ["# Ansible managed"] + [f"{k} = {json.dumps(v)}" for k, v in sorted(keys.items())]
        return "\n".join(lines) + "\n"

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def mutating_calls(self) -> list[str]:
        ro = ("is-enabled", "is-active", "show")
        return [c for c in self.calls() if not c.startswith(ro)]

    def files(self) -> dict[str, tuple[int, bytes]]:
        """Every file under the node (not the fake's own state): mtime and content."""
        out = {}
        for p in sorted(self.root.rglob("*")):
            if p.is_file() and self.state not in p.parents and p != self.log:
                out[str(p.relative_to(self.root))] = (p.stat().st_mtime_ns, p.read_bytes())
        return out


@pytest.fixture
def node(tmp_path, monkeypatch, fake_node):
    """fake_node (tests/unit/conftest.py): device nodes under tmp_path, discovery one T4."""
    n = Node(tmp_path / "node")
    n.dev_root = str(tmp_path)
    exe = tmp_path / "bin" / "systemctl"
    exe.parent.mkdir()
    exe.write_text(FAKE_SYSTEMCTL.format(state=n.state, log=n.log))
    exe.chmod(0o755)
    monkeypatch.setattr(runtime_setup, "SYSTEMCTL", str(exe))
    monkeypatch.setattr(docker, "DOCKERD", "gpunode-test-no-such-dockerd")
    monkeypatch.setattr(containerd, "CONTAINERD", "gpunode-test-no-such-containerd")
    monkeypatch.setattr(runtime_setup, "CRI_DOCKERD_PATHS", (), raising=False)  # none here
    fake_load = discovery.load

    def load(*args, **kwargs):
        n.discoveries.append(kwargs)
        return fake_load(*args, **kwargs)

    monkeypatch.setattr(discovery, "load", load)
    return n


def run(
    node: Node,
    capsys,
    *extra: str,
    doc: dict | None = None,
    docker_: bool = True,
    containerd_: bool = False,
    units: bool = True,
) -> tuple[int, dict | None, str]:
    """`gpunode runtime setup --json` as the role runs it; (exit code, JSON, stderr)."""
    if doc is None:
        doc = {"config": node.settings()}
        if units:
            doc["units"] = {"gpunode-refresh.service": SERVICE, "gpunode-refresh.path": PATH_UNIT}
    inp = node.root / "input.json"
    node.root.mkdir(exist_ok=True)
    inp.write_text(json.dumps(doc))
    args = [
        "runtime",
        "setup",
        "--json",
        "--input",
        str(inp),
        "--config",
        str(node.config),
        "--cdi-spec",
        "--unit-dir",
        str(node.unit_dir),
    ]
    if docker_:
        args += ["--docker", "--docker-config", str(node.daemon_json)]
    if containerd_:
        args += [
            "--containerd",
            "--containerd-config",
            str(node.containerd),
            "--containerd-drop-in-dir",
            str(node.drop_in_dir),
        ]
    if units:
        args += [
            "--enable",
            "gpunode-refresh.service",
            "--enable",
            "gpunode-refresh.path",
            "--start",
            "gpunode-refresh.path",
        ]
    code = cli.main([*args, *extra])
    out, err = capsys.readouterr()
    inp.unlink()
    return code, (json.loads(out) if out else None), err


def by_kind(out: dict) -> dict[str, dict]:
    return {f["kind"] if f["kind"] != "unit" else Path(f["path"]).name: f for f in out["files"]}


def test_first_run_does_everything_and_says_what_changed(node, capsys):
    node.daemon_json.parent.mkdir(parents=True)
    node.daemon_json.write_text('{"log-level": "warn"}\n')
    code, out, err = run(node, capsys)
    assert code == 0, err
    assert out["changed"] is True and out["dry_run"] is False
    files = by_kind(out)
    assert set(files) == {
        "runtime.toml", "daemon.json", "cdi spec", "gpunode-refresh.service",
        "gpunode-refresh.path",
    }  # fmt: skip
    assert all(f["changed"] for f in files.values())
    assert "before" not in files["daemon.json"]  # contents only in a dry run
    assert out["changed_files"] == [f["path"] for f in out["files"]]
    assert out["restart"] == ["docker"]
    assert out["systemd"] == {
        "daemon_reload": True,
        "enabled": ["gpunode-refresh.service", "gpunode-refresh.path"],
        "started": ["gpunode-refresh.path"],
        "stopped": [],
        "disabled": [],
    }
    assert node.config.read_text() == node.settings()
    assert stat.S_IMODE(node.config.stat().st_mode) == 0o644
    assert (node.unit_dir / "gpunode-refresh.service").read_text() == SERVICE
    assert (node.unit_dir / "gpunode-refresh.path").read_text() == PATH_UNIT
    spec = (node.cdi_dir / "nvidia.yaml").read_text()
    assert "kind: nvidia.com/gpu" in spec and "GPU-00000000" in spec
    assert files["cdi spec"]["path"] == str(node.cdi_dir / "nvidia.yaml")
    assert node.discoveries == [{"refresh": True, "store": True}]  # the cache refreshed too
    # units written before the reload, reload before enable and start
    assert node.mutating_calls() == [
        "daemon-reload",
        "enable gpunode-refresh.service",
        "enable gpunode-refresh.path",
        "start gpunode-refresh.path",
    ]


def test_second_run_changes_nothing_and_writes_nothing(node, capsys):
    assert run(node, capsys)[0] == 0
    before = node.files()
    calls = len(node.calls())
    code, out, err = run(node, capsys)
    assert code == 0, err
    assert out["changed"] is False and out["changed_files"] == [] and out["restart"] == []
    assert out["systemd"] == {
        "daemon_reload": False, "enabled": [], "started": [], "stopped": [], "disabled": [],
    }  # fmt: skip
    assert node.files() == before  # same content, same mtime: nothing rewritten
    assert [c for c in node.calls()[calls:] if not c.startswith(("is-", "show"))] == []
    assert [c.split()[0] for c in node.calls()[calls:]] == [
        "show", "show", "is-enabled", "is-enabled", "is-active",
    ]  # fmt: skip


def test_invalid_config_is_refused_and_nothing_is_touched(node, capsys):
    assert run(node, capsys)[0] == 0
    before = node.files()
    doc = {"config": node.settings(**{"log-levl": "debug"}), "units": {}}
    code, out, err = run(node, capsys, doc=doc)
    assert code == 2 and out is None
    assert err.splitlines() == [
        f"gpunode: error: {node.config} (new content): unknown key 'log-levl'; accepted keys: "
        "accept-envvar-unprivileged, accept-volume-mounts, annotation-prefixes, cache-file, "
        "cdi-spec-dirs, default-capabilities, dev-root, disable-require, driver-root, hook-path, "
        f"ldconfig, log-file, log-level, runtimes, supported-capabilities; {node.config} left "
        "unchanged"
    ]
    assert node.files() == before
    assert sorted(os.listdir(node.config.parent)) == ["runtime.toml"]  # no temporary file


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"log-level": "loud"}, "log-level 'loud' is not one of debug, info, warning, error"),
        ({"runtimes": "runc"}, "runtimes = 'runc' is not valid; expected a list of strings"),
    ],
)
def test_invalid_value_is_named_before_any_write(node, capsys, settings, message):
    code, out, err = run(node, capsys, doc={"config": node.settings(**settings)})
    assert code == 2 and out is None
    assert len(err.splitlines()) == 1 and message in err, err
    assert not node.config.exists() and not node.daemon_json.exists()
    assert not node.unit_dir.exists() and node.calls() == []


def test_not_toml_is_refused(node, capsys):
    code, _, err = run(node, capsys, doc={"config": "log-level = \n"})
    assert code == 2
    assert err.startswith(f"gpunode: error: {node.config} (new content): not valid TOML")
    assert len(err.splitlines()) == 1 and not node.config.exists()


def test_daemon_json_other_keys_kept_with_backup(node, capsys):
    node.daemon_json.parent.mkdir(parents=True)
    operator = {
        "log-level": "warn",
        "features": {"buildkit": True},
        "runtimes": {"x": {"path": "/x"}},
    }
    node.daemon_json.write_text(json.dumps(operator))
    code, out, err = run(node, capsys, "--docker-default", "--docker-cdi", "--docker-name", "gn",
                         "--docker-runtime-path", "/opt/rt")  # fmt: skip
    assert code == 0, err
    assert json.loads(node.daemon_json.read_text()) == {
        "log-level": "warn",
        "features": {"buildkit": True, "cdi": True},
        "runtimes": {"x": {"path": "/x"}, "gn": {"path": "/opt/rt"}},
        "default-runtime": "gn",
    }
    backup = by_kind(out)["daemon.json"]["backup"]
    assert backup == f"{node.daemon_json}.gpunode-backup"
    assert json.loads(Path(backup).read_text()) == operator


def test_dry_run_writes_nothing_and_returns_before_and_after(node, capsys):
    node.daemon_json.parent.mkdir(parents=True)
    node.daemon_json.write_text('{"log-level": "warn"}\n')
    before = node.files()
    code, out, err = run(node, capsys, "--dry-run")
    assert code == 0, err
    assert out["dry_run"] is True and out["changed"] is True
    assert node.files() == before  # not a file, not a directory, not the cache
    assert not node.config.parent.exists() and not node.unit_dir.exists()
    assert node.discoveries == [{"refresh": True, "store": False}]
    assert node.mutating_calls() == []
    files = by_kind(out)
    dj = files["daemon.json"]
    assert dj["before"] == '{"log-level": "warn"}\n'
    assert json.loads(dj["after"]) == {"log-level": "warn", "runtimes": {"gpunode": {"path": RT}}}
    assert files["runtime.toml"] == {
        "kind": "runtime.toml", "path": str(node.config), "changed": True, "before": None,
        "after": node.settings(),
    }  # fmt: skip
    assert files["gpunode-refresh.service"]["after"] == SERVICE
    assert "kind: nvidia.com/gpu" in files["cdi spec"]["after"]
    # the plan is the real run's: same files, same systemd actions
    assert out["restart"] == ["docker"]
    assert out["systemd"]["daemon_reload"] is True
    assert out["systemd"]["enabled"] == ["gpunode-refresh.service", "gpunode-refresh.path"]
    assert out["systemd"]["started"] == ["gpunode-refresh.path"]
    real = run(node, capsys)[1]
    assert [(f["path"], f["changed"]) for f in real["files"]] == [
        (f["path"], f["changed"]) for f in out["files"]
    ]
    assert real["systemd"] == out["systemd"] and real["restart"] == out["restart"]
    assert by_kind(real)["cdi spec"]["path"] == files["cdi spec"]["path"]
    assert (node.cdi_dir / "nvidia.yaml").read_text() == files["cdi spec"]["after"]
    assert node.daemon_json.read_text() == dj["after"]


def test_dry_run_on_a_converged_node_reports_nothing(node, capsys):
    assert run(node, capsys)[0] == 0
    code, out, err = run(node, capsys, "--dry-run")
    assert code == 0, err
    assert out["changed"] is False and out["changed_files"] == []
    assert all(f["before"] == f["after"] for f in out["files"])


def test_dry_run_reads_the_new_config_for_the_cdi_spec(node, capsys):
    """The spec's directory comes from the candidate runtime.toml, not the file on the node."""
    assert run(node, capsys)[0] == 0
    moved = node.root / "etc/cdi-new"
    doc = {"config": node.settings(**{"cdi-spec-dirs": [str(moved)]})}
    out = run(node, capsys, "--dry-run", doc=doc, units=False)[1]
    assert by_kind(out)["cdi spec"]["path"] == str(moved / "nvidia.yaml")
    assert by_kind(out)["cdi spec"]["before"] is None and not moved.exists()


def test_changed_unit_means_daemon_reload(node, capsys):
    assert run(node, capsys)[0] == 0
    calls = len(node.calls())
    doc = {
        "config": node.settings(),
        "units": {
            "gpunode-refresh.service": SERVICE + "# edited\n",
            "gpunode-refresh.path": PATH_UNIT,
        },
    }
    code, out, err = run(node, capsys, doc=doc)
    assert code == 0, err
    assert out["changed"] is True and out["changed_files"] == [
        str(node.unit_dir / "gpunode-refresh.service")
    ]
    assert out["systemd"] == {
        "daemon_reload": True, "enabled": [], "started": [], "stopped": [], "disabled": [],
    }  # fmt: skip
    assert [c for c in node.calls()[calls:] if not c.startswith(("is-", "show"))] == [
        "daemon-reload"
    ]


def test_unit_systemd_has_not_reloaded_yet_means_daemon_reload(node, capsys):
    """A run whose daemon-reload failed wrote the unit: the next run reloads, though the
    file is unchanged by then."""
    assert run(node, capsys)[0] == 0
    (node.state / "stale.gpunode-refresh.path").touch()
    out = run(node, capsys)[1]
    assert out["changed"] is True and out["changed_files"] == []
    assert out["systemd"]["daemon_reload"] is True and node.mutating_calls()[-1] == "daemon-reload"


def test_enabled_and_active_units_are_left_alone(node, capsys):
    for what in ("enabled.gpunode-refresh.service", "enabled.gpunode-refresh.path",
                 "active.gpunode-refresh.path"):  # fmt: skip
        (node.state / what).touch()
    code, out, err = run(node, capsys)
    assert code == 0, err
    assert out["systemd"] == {
        "daemon_reload": True, "enabled": [], "started": [], "stopped": [], "disabled": [],
    }  # fmt: skip
    assert node.mutating_calls() == ["daemon-reload"]


def test_disabled_unit_is_enabled_again(node, capsys):
    assert run(node, capsys)[0] == 0
    (node.state / "enabled.gpunode-refresh.service").unlink()
    (node.state / "active.gpunode-refresh.path").unlink()
    out = run(node, capsys)[1]
    assert out["changed"] is True and out["changed_files"] == []
    assert out["systemd"] == {
        "daemon_reload": False,
        "enabled": ["gpunode-refresh.service"],
        "started": ["gpunode-refresh.path"],
        "stopped": [],
        "disabled": [],
    }


def test_failed_systemctl_is_one_line_exit_1(node, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SYSTEMCTL_FAIL", "enable")
    code, out, err = run(node, capsys)
    assert code == 1 and out is None
    assert err.splitlines() == [
        "gpunode: error: `systemctl enable gpunode-refresh.service` failed: Failed to enable "
        "unit: Access denied"
    ]
    # the steps before it were done, each file whole; the engines' files come last and were
    # not touched, so no engine is left without the restart a change needs
    assert node.config.read_text() == node.settings()
    assert (node.unit_dir / "gpunode-refresh.path").read_text() == PATH_UNIT
    assert not node.daemon_json.exists()
    monkeypatch.delenv("FAKE_SYSTEMCTL_FAIL")
    out = run(node, capsys)[1]  # the next run finishes the job
    assert out["changed_files"] == [str(node.daemon_json)] and out["restart"] == ["docker"]
    assert out["systemd"]["enabled"] == ["gpunode-refresh.service", "gpunode-refresh.path"]


def test_missing_systemctl_is_a_failure(node, capsys, monkeypatch):
    monkeypatch.setattr(runtime_setup, "SYSTEMCTL", str(node.root / "no-systemctl"))
    code, _, err = run(node, capsys)
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith("gpunode: error: `systemctl daemon-reload` could not run")


def test_same_content_wrong_mode_is_fixed(node, capsys):
    assert run(node, capsys)[0] == 0
    node.config.chmod(0o600)
    mtime = node.config.stat().st_mtime_ns
    out = run(node, capsys)[1]
    assert out["changed_files"] == [str(node.config)]
    assert stat.S_IMODE(node.config.stat().st_mode) == 0o644
    assert node.config.stat().st_mtime_ns == mtime


def test_without_config_content_the_file_is_left_and_read(node, capsys):
    """No "config" in the input: runtime.toml is not written, the CDI spec follows it."""
    node.config.parent.mkdir(parents=True)
    node.config.write_text(node.settings())
    mtime = node.config.stat().st_mtime_ns
    code, out, err = run(node, capsys, doc={}, docker_=False, units=False)
    assert code == 0, err
    assert [f["kind"] for f in out["files"]] == ["cdi spec"]
    assert (node.cdi_dir / "nvidia.yaml").exists()
    assert node.config.stat().st_mtime_ns == mtime


def test_containerd_registration_reports_both_files(node, capsys):
    code, out, err = run(node, capsys, "--containerd-default", containerd_=True, units=False)
    assert code == 0, err
    files = by_kind(out)
    assert files["containerd config"]["changed"] and files["containerd drop-in"]["changed"]
    assert files["containerd drop-in"]["path"] == str(node.drop_in_dir / "99-gpunode.toml")
    assert sorted(out["restart"]) == ["containerd", "docker"]
    drop = (node.drop_in_dir / "99-gpunode.toml").read_text()
    assert 'default_runtime_name = "gpunode"' in drop
    out = run(node, capsys, "--containerd-default", containerd_=True, units=False)[1]
    assert out["changed"] is False and out["restart"] == []


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{nope", "--input -: not valid JSON (line 1 column 2: "),
        ("[]", "--input -: expected a JSON object with the keys config, units"),
        ('{"conf": ""}', "--input -: unknown key 'conf'; accepted keys: config, units"),
        ('{"units": {"a b.service": ""}}', "--input -: units: 'a b.service' is not a systemd"),
        ('{"units": {"x.service": 1}}', "--input -: units must map unit names to their content"),
    ],
)
def test_bad_input_document_is_one_line_exit_2(node, capsys, monkeypatch, stdin, message):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(["runtime", "setup", "--input", "-", "--config", str(node.config)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"gpunode: error: {message}"), err
    assert not node.config.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--docker-cdi"], "--docker-cdi needs --docker"),
        (["--containerd-default"], "--containerd-default needs --containerd"),
        (["--enable", "../x"], "--enable: '../x' is not a systemd unit name"),
    ],
)
def test_bad_options_are_one_line_exit_2(node, capsys, args, message):
    assert cli.main(["runtime", "setup", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err


def test_text_output_says_what_changed(node, capsys):
    inp = node.root / "in.json"
    node.root.mkdir(exist_ok=True)
    inp.write_text(json.dumps({"config": node.settings()}))
    args = ["runtime", "setup", "--input", str(inp), "--config", str(node.config)]
    assert cli.main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out == f"{node.config}: would change\n"
    assert cli.main(args) == 0 and cli.main(args) == 0
    assert capsys.readouterr().out == f"{node.config}: changed\n{node.config}: unchanged\n"


def test_dry_run_without_config_content_reads_the_file_and_writes_no_cache(node, capsys):
    node.config.parent.mkdir(parents=True)
    node.config.write_text(node.settings())
    cache = Path(os.environ["GPUNODE_RUNTIME_CONFIG_CACHE"])
    code, out, err = run(node, capsys, "--dry-run", doc={}, docker_=False, units=False)
    assert code == 0, err
    assert by_kind(out)["cdi spec"]["path"] == str(node.cdi_dir / "nvidia.yaml")  # from the file
    assert not cache.exists() and node.discoveries == [{"refresh": True, "store": False}]
    assert run(node, capsys, doc={}, docker_=False, units=False)[0] == 0
    assert cache.exists()  # a real run loads runtime.toml as the runtime does, cache and all


def test_containerd_kubernetes_options(node, capsys):
    """Handler names, CDI with the spec's directory, annotations from runtime.toml and the
    RuntimeClass manifest; a second run changes nothing and restarts nothing."""
    rc = node.root / "etc/gpunode/kubernetes/runtimeclass.yaml"
    k8s = ["--containerd-name", "gpunode", "--containerd-name", "nvidia", "--containerd-cdi"]
    k8s += ["--containerd-pass-annotations", "--containerd-runtime-class", str(rc)]
    code, out, err = run(node, capsys, *k8s, containerd_=True, docker_=False, units=False)
    assert code == 0, err
    files = by_kind(out)
    assert files["runtimeclass"]["changed"] and files["runtimeclass"]["path"] == str(rc)
    assert out["restart"] == ["containerd"]
    cri = tomllib.loads((node.drop_in_dir / "99-gpunode.toml").read_text())["plugins"][
        "io.containerd.grpc.v1.cri"
    ]
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == [str(node.cdi_dir)]
    for name in ("gpunode", "nvidia"):
        assert cri["containerd"]["runtimes"][name]["container_annotations"] == ["cdi.k8s.io/*"]
    docs = [d for d in yaml.safe_load_all(rc.read_text()) if d]
    assert docs == [
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": n},
            "handler": n,
        }
        for n in ("gpunode", "nvidia")
    ]
    again = run(node, capsys, *k8s, containerd_=True, docker_=False, units=False)[1]
    assert again["changed"] is False and again["restart"] == []
    # the manifest alone changing restarts nothing
    rc.write_text("# edited\n")
    third = run(node, capsys, *k8s, containerd_=True, docker_=False, units=False)[1]
    assert third["changed_files"] == [str(rc)] and third["restart"] == []


def test_containerd_cdi_refused_before_anything_is_written(node, capsys, monkeypatch, tmp_path):
    from .fakes import fake_containerd

    fake_containerd(tmp_path, monkeypatch, version="1.6.20~ds1")
    code, out, err = run(
        node, capsys, "--containerd-cdi", containerd_=True, docker_=False, units=False
    )
    assert code == 2 and out is None
    assert len(err.splitlines()) == 1
    assert err.startswith(f"gpunode: error: {node.containerd}: containerd 1.6.20 has no CDI")
    assert not node.config.exists() and not node.cdi_dir.exists()  # preflight: nothing written
    assert not node.containerd.exists()


def test_containerd_runtime_class_needs_kubernetes_names(node, capsys):
    rc = node.root / "rc.yaml"
    code, out, err = run(
        node,
        capsys,
        "--containerd-name",
        "GPU_node",
        "--containerd-runtime-class",
        str(rc),
        containerd_=True,
        docker_=False,
        units=False,
    )
    assert code == 2 and out is None and len(err.splitlines()) == 1
    assert "--containerd-name 'GPU_node': not usable as a Kubernetes RuntimeClass handler" in err
    assert not rc.exists() and not node.config.exists()


def test_containerd_kubernetes_dry_run_shows_the_manifest(node, capsys):
    rc = node.root / "rc.yaml"
    extra = ["--containerd-name", "nvidia", "--containerd-runtime-class", str(rc), "--dry-run"]
    code, out, err = run(node, capsys, *extra, containerd_=True, docker_=False, units=False)
    assert code == 0, err
    f = by_kind(out)["runtimeclass"]
    assert f["changed"] and f["before"] is None and "handler: nvidia\n" in f["after"]
    assert not rc.exists() and not node.containerd.exists()


def test_containerd_kubernetes_writes_the_device_plugin_values(node, capsys):
    """Beside the RuntimeClass manifest: NVIDIA's device plugin's values for the node, said
    in the JSON as changed like the manifest; unchanged on the second run."""
    rc = node.root / "etc/gpunode/kubernetes/runtimeclass.yaml"
    values = rc.parent / "nvidia-device-plugin-values.yaml"
    k8s = ["--containerd-name", "nvidia", "--containerd-cdi", "--containerd-runtime-class", str(rc)]
    k8s += ["--containerd-nvidia-cdi-hook", "/opt/gpunode/libexec/nvidia-cdi-hook"]
    code, out, err = run(node, capsys, *k8s, containerd_=True, docker_=False, units=False)
    assert code == 0, err
    f = by_kind(out)["device plugin values"]
    assert f["changed"] and f["path"] == str(values) and str(values) in out["changed_files"]
    got = yaml.safe_load(values.read_text())
    assert got["deviceListStrategy"] == "cdi-cri" and got["runtimeClassName"] == "nvidia"
    assert got["cdi"] == {"nvidiaHookPath": "/opt/gpunode/libexec/nvidia-cdi-hook"}
    again = run(node, capsys, *k8s, containerd_=True, docker_=False, units=False)[1]
    assert not by_kind(again)["device plugin values"]["changed"]
    # no CDI, runtime.toml accepting volume mounts: volume-mounts; the default hook path
    doc = {"config": node.settings(**{"accept-volume-mounts": True})}
    k8s = ["--containerd-name", "nvidia", "--containerd-runtime-class", str(rc)]
    code, out, err = run(node, capsys, *k8s, doc=doc, containerd_=True, docker_=False, units=False)
    assert code == 0, err
    got = yaml.safe_load(values.read_text())
    assert got["deviceListStrategy"] == "volume-mounts"
    assert got["cdi"] == {"nvidiaHookPath": "/usr/local/libexec/gpunode/nvidia-cdi-hook"}


def test_device_plugin_without_a_strategy_is_refused_before_anything_is_written(node, capsys):
    rc = node.root / "rc.yaml"
    doc = {"config": node.settings(**{"accept-envvar-unprivileged": False})}
    code, out, err = run(
        node, capsys, "--containerd-runtime-class", str(rc), doc=doc, containerd_=True,
        docker_=False, units=False,
    )  # fmt: skip
    assert code == 2 and out is None and len(err.splitlines()) == 1, err
    assert "NVIDIA's device plugin has no strategy that reaches GPUs on this node" in err
    assert not rc.exists() and not node.containerd.exists()


def _runtime_toml(node) -> dict:
    return tomllib.loads(node.config.read_text())


def test_kubernetes_node_is_secure_by_default(node, capsys):
    """--kubernetes (the role with gpunode registered with containerd): runtime.toml gets
    accept-envvar-unprivileged = false and accept-volume-mounts = true, said in the file;
    the runtime reads them so; a second run changes nothing."""
    code, _, err = run(node, capsys, "--kubernetes", docker_=False, units=False)
    assert code == 0, err
    text = node.config.read_text()
    assert text.startswith(node.settings()), "the given content is kept as it is"
    data = _runtime_toml(node)
    assert data["accept-envvar-unprivileged"] is False and data["accept-volume-mounts"] is True
    assert "device plugin allocation" in text
    from gpunode.runtime import config as runtime_config

    cfg = runtime_config.load(str(node.config), write_caches=False)
    assert cfg.accept_envvar_unprivileged is False and cfg.accept_volume_mounts is True
    again = run(node, capsys, "--kubernetes", docker_=False, units=False)[1]
    assert again["changed"] is False


def test_kubernetes_keeps_what_the_content_sets(node, capsys):
    """A key the operator's settings set is theirs (accept-volume-mounts = false: the
    volume-mounts strategy then gives nothing, which is not insecure)."""
    doc = {"config": node.settings() + "accept-volume-mounts = false\n"}
    code, _, err = run(node, capsys, "--kubernetes", doc=doc, docker_=False, units=False)
    assert code == 0, err
    data = _runtime_toml(node)
    assert data["accept-volume-mounts"] is False and data["accept-envvar-unprivileged"] is False


def test_kubernetes_open_mode_needs_the_insecure_opt_in(node, capsys):
    doc = {"config": node.settings() + "accept-envvar-unprivileged = true\n"}
    code, out, err = run(node, capsys, "--kubernetes", doc=doc, docker_=False, units=False)
    assert code == 2 and out is None and len(err.splitlines()) == 1
    assert "accept-envvar-unprivileged = true on a Kubernetes node" in err
    assert "--kubernetes-insecure-envvar" in err
    assert not node.config.exists() and not node.cdi_dir.exists()
    code, _, err = run(
        node, capsys, "--kubernetes", "--kubernetes-insecure-envvar", doc=doc, docker_=False,
        units=False,
    )  # fmt: skip
    assert code == 0, err
    assert _runtime_toml(node)["accept-envvar-unprivileged"] is True


def test_kubernetes_insecure_opt_in_is_written_explicitly(node, capsys):
    args = ("--kubernetes", "--kubernetes-insecure-envvar")
    code, _, err = run(node, capsys, *args, docker_=False, units=False)
    assert code == 0, err
    data = _runtime_toml(node)
    assert data["accept-envvar-unprivileged"] is True and data["accept-volume-mounts"] is True
    assert "insecure opt-in" in node.config.read_text()


def test_kubernetes_without_content_checks_the_file(node, capsys):
    """No runtime.toml content given: the node's file is refused while it accepts the env
    from unprivileged containers (a key it lacks is gpunode's default, true)."""
    node.config.parent.mkdir(parents=True)
    node.config.write_text(node.settings())
    code, _, err = run(node, capsys, "--kubernetes", doc={}, docker_=False, units=False)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{node.config}: accept-envvar-unprivileged is true" in err
    node.config.write_text(node.settings() + "accept-envvar-unprivileged = false\n")
    code, _, err = run(node, capsys, "--kubernetes", doc={}, docker_=False, units=False)
    assert code == 0, err


def test_insecure_opt_in_needs_kubernetes(node, capsys):
    assert cli.main(["runtime", "setup", "--kubernetes-insecure-envvar"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "needs --kubernetes" in err


def test_a_unit_turned_off_is_stopped_and_disabled_once(node, capsys):
    """gpu_container_runtime_resident: false after true: the running service is stopped
    and disabled, and the next run finds nothing to do; a unit that was never there is
    no change."""
    unit = "gpunode-runtime-resident.service"
    off = ("--stop", unit, "--disable", unit)
    assert run(node, capsys, "--enable", unit, "--start", unit)[0] == 0
    calls = len(node.calls())
    code, out, err = run(node, capsys, *off)
    assert code == 0, err
    assert out["changed"] is True
    assert out["systemd"]["stopped"] == [unit] and out["systemd"]["disabled"] == [unit]
    assert [c for c in node.calls()[calls:] if c.startswith(("stop", "disable"))] == [
        f"stop {unit}", f"disable {unit}",
    ]  # fmt: skip
    code, out, err = run(node, capsys, *off)
    assert code == 0, err
    assert out["changed"] is False
    assert out["systemd"]["stopped"] == [] and out["systemd"]["disabled"] == []
    code, out, _ = run(node, capsys, "--dry-run", "--stop", "other.service")
    assert out["changed"] is False


@pytest.mark.parametrize("sign", ["run/cri-dockerd.sock", "lib/systemd/system/cri-docker.service"])
def test_docker_node_with_cri_dockerd_is_secure_by_default(node, capsys, monkeypatch, sign):
    """A kubelet on Docker through cri-dockerd (its socket or unit there): Docker's runtime
    reads the same runtime.toml, so it gets the Kubernetes settings without --kubernetes;
    the open mode stays the explicit opt-in."""
    found = node.root / "cri" / sign
    monkeypatch.setattr(
        runtime_setup, "CRI_DOCKERD_PATHS", (str(node.root / "no.sock"), str(found))
    )
    code, out, err = run(node, capsys, units=False)
    assert code == 0, err
    assert "accept-envvar-unprivileged" not in _runtime_toml(node), "no cri-dockerd: open"
    assert out["kubernetes"] is None
    found.parent.mkdir(parents=True)
    found.touch()
    code, out, err = run(node, capsys, units=False)
    assert code == 0, err
    # the JSON says why the node got the Kubernetes settings
    assert out["kubernetes"] == f"cri-dockerd ({found})"
    text = node.config.read_text()
    assert f"# Kubernetes node (cri-dockerd ({found})): an unprivileged" in text, text
    data = _runtime_toml(node)
    assert data["accept-envvar-unprivileged"] is False and data["accept-volume-mounts"] is True
    doc = {"config": node.settings() + "accept-envvar-unprivileged = true\n"}
    code, out, err = run(node, capsys, doc=doc, units=False)
    assert code == 2 and out is None and len(err.splitlines()) == 1, err
    assert "--kubernetes-insecure-envvar" in err
    code, out, err = run(node, capsys, "--kubernetes", "--kubernetes-insecure-envvar", units=False)
    assert code == 0, err
    assert _runtime_toml(node)["accept-envvar-unprivileged"] is True
    assert out["kubernetes"] == "asked"
