"""The gpu_watch role's pure parts, rendered by Ansible's own templar: gpunode-watch.service
(a valid unit whose ExecStart is `gpunode watch run` with the inventory's values, restarted on
failure but never in a fast loop, hardened without losing /dev/kmsg or the GPUs), the
interval check it shares with gpu_preflight's `gpunode provision validate`, and how the
playbook wires it in."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from gpunode.cli.main import main as cli_main

from .test_gpu_mig_role import _plugins, _trusted

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gpu_watch"




def render(expr: str, **inventory):
    _plugins()
    role_vars = {}
    for part in ("defaults", "vars"):
        role_vars.update(_trusted(yaml.safe_load((ROLE / part / "main.yml").read_text())))
    variables = {
        **role_vars,
        "inventory_hostname": "gpu-a",
        "ansible_check_mode": False,
        "ansible_search_path": [str(ROLE)],
        "role_path": str(ROLE),
        **inventory,
    }
    return Templar(loader=DataLoader(), variables=variables).template(_trusted(expr))


def unit(**inventory) -> str:
    return render(
        "{{ lookup('ansible.builtin.template', 'gpunode-watch.service.j2') }}", **inventory
    )


def parsed(text: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None, strict=True)  # a key twice fails
    cp.optionxform = str  # systemd's keys are case-sensitive
    cp.read_string(text)
    return cp


def test_the_unit_runs_gpunode_watch_with_the_inventorys_values():
    cp = parsed(unit())
    assert cp.sections() == ["Unit", "Service", "Install"]
    assert shlex.split(cp["Service"]["ExecStart"]) == [
        "/usr/local/bin/gpunode", "watch", "run", "--interval", "60",
        "--textfile", "/var/lib/prometheus/node-exporter/gpunode-watch.prom",
        "--state-dir", "/var/lib/gpunode", "--node", "gpu-a",
    ]  # fmt: skip
    cp = parsed(unit(gpu_watch_interval=15, gpu_watch_textfile="/srv/tf/w.prom",
                     gpu_watch_state_dir="/srv/state", gpunode_install_bin_dir="/opt/bin"))  # fmt: skip
    argv = shlex.split(cp["Service"]["ExecStart"])
    assert argv[0] == "/opt/bin/gpunode"
    assert argv[3:] == ["--interval", "15", "--textfile", "/srv/tf/w.prom",
                        "--state-dir", "/srv/state", "--node", "gpu-a"]  # fmt: skip
    assert cp["Service"]["ReadWritePaths"].split() == ["/srv/tf", "/srv/state"]


def test_the_argv_is_the_clis_own():
    """What the unit runs is a command line `gpunode watch run` accepts (its own parser)."""
    import argparse

    from gpunode.cli import watch

    argv = shlex.split(parsed(unit(gpu_watch_interval=3600))["Service"]["ExecStart"])
    p = argparse.ArgumentParser()
    watch.add_arguments(p)
    args = p.parse_args(argv[2:])
    assert (args.action, args.interval, args.node) == ("run", 3600.0, "gpu-a")
    assert args.textfile.endswith(".prom")  # node_exporter reads only *.prom


def test_systemd_specifiers_and_variables_in_a_path_stay_literal():
    argv = render("{{ _gpu_watch_argv }}", gpu_watch_state_dir="/srv/50%/$HOME")
    assert argv[8] == "/srv/50%/$HOME"
    line = parsed(unit(gpu_watch_state_dir="/srv/50%/$HOME"))["Service"]["ExecStart"]
    assert "'/srv/50%%/$$HOME'" in line


def test_a_failing_watch_is_restarted_but_never_in_a_fast_loop():
    cp = parsed(unit())
    assert cp["Service"]["Restart"] == "on-failure"
    assert int(cp["Service"]["RestartSec"]) >= 5
    # the start limit: at most 5 starts in 10 minutes ([Unit], where systemd reads it)
    assert int(cp["Unit"]["StartLimitBurst"]) * int(cp["Service"]["RestartSec"]) < int(
        cp["Unit"]["StartLimitIntervalSec"]
    )
    assert "KillMode" not in cp["Service"]  # SIGTERM to the watch: exit 0
    assert cp["Install"]["WantedBy"] == "multi-user.target"


def test_the_hardening_leaves_the_kernel_log_and_the_gpus():
    service = parsed(unit())["Service"]
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes" and service["PrivateTmp"] == "yes"
    assert service["ReadWritePaths"].split() == ["/var/lib/prometheus/node-exporter",
                                                 "/var/lib/gpunode"]  # fmt: skip
    # /dev/kmsg, /dev/nvidia*, the driver's /proc files: none of these may be taken away
    for key in ("ProtectKernelLogs", "PrivateDevices", "DevicePolicy", "DeviceAllow",
                "ProtectProc", "ProcSubset", "User", "DynamicUser"):  # fmt: skip
        assert key not in service, key


def test_one_directory_for_textfile_and_state_is_listed_once():
    assert render("{{ _gpu_watch_dirs }}", gpu_watch_textfile="/var/lib/gpunode/w.prom") == [
        "/var/lib/gpunode"
    ]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_rendered_unit(tmp_path):
    fake = tmp_path / "bin" / "gpunode"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    path = tmp_path / "gpunode-watch.service"
    path.write_text(unit(gpu_watch_cli=[str(fake)], gpu_watch_state_dir=str(tmp_path / "s"),
                         gpu_watch_textfile=str(tmp_path / "tf" / "w.prom")))  # fmt: skip
    proc = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip
    ours = [line for line in proc.stderr.splitlines() if str(path) in line]
    assert proc.returncode == 0 and ours == [], proc.stderr


@pytest.mark.parametrize("value", ["5", "60", "3600"])
def test_the_interval_check_takes(value):
    assert render("{{ _gpu_watch_interval_ok | bool }}", gpu_watch_interval=value) is True
    assert cli_main(["provision", "validate", f"--watch-interval={value}"]) == 0


@pytest.mark.parametrize("value", ["0", "4", "3601", "1.5", "abc", "-5"])
def test_a_bad_interval_is_one_line_on_the_controller(capsys, value):
    """gpu_preflight's `provision validate` refuses it before any change, in the line its
    siblings (nvidia_driver_fabric_wait_timeout) have; the role's own check agrees."""
    assert render("{{ _gpu_watch_interval_ok | bool }}", gpu_watch_interval=value) is False
    assert cli_main(["provision", "validate", f"--watch-interval={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"gpunode: error: gpu_watch_interval: {value!r} is not a whole number of seconds "
        "from 5 to 3600"
    ]


def test_gpu_preflight_passes_the_interval_where_the_watch_runs():
    vars_ = yaml.safe_load((ROOT / "roles/gpu_preflight/vars/main.yml").read_text())
    text = vars_["_gpu_preflight_validate_args"]
    assert "'--watch-interval=' ~ gpu_preflight_watch_interval" in text
    assert "gpu_watch_enabled | default(true)" in text
    defaults = yaml.safe_load((ROOT / "roles/gpu_preflight/defaults/main.yml").read_text())
    assert defaults["gpu_preflight_watch_interval"] == "{{ gpu_watch_interval | default(60) }}"


def test_provision_runs_the_watch_on_gpu_nodes_after_the_runtime():
    play = yaml.safe_load((ROOT / "playbooks/provision.yml").read_text())[0]
    names = [r["role"].rsplit(".", 1)[-1] for r in play["roles"]]
    assert names.index("gpu_watch") == names.index("gpu_container_runtime") + 1
    entry = play["roles"][names.index("gpu_watch")]
    assert entry["tags"] == ["watch"] and entry["when"] == "gpunode_has_gpu | bool"
    assert "gpu_watch_restart" in entry["vars"]


def test_the_example_inventory_sets_every_knob():
    example = (ROOT / "inventories/example/group_vars/gpu_nodes.yml").read_text()
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    missing = [key for key in defaults if key not in example]
    assert missing == []
