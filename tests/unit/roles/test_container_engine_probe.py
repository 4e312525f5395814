"""container_engine's probe (roles/container_engine/files/probe.sh): the one module run the
role costs on a node where Docker is installed, enabled, running and has its extra
packages. It looks at the node and decides what engine.yml has to do, printed as JSON
(`todo`), since the role runs on GPU-less nodes too, where there is no gpunode to ask.
The script runs here with a fake systemctl, dpkg-query and rpm on PATH and dockerd paths
under tmp_path; its arguments are checked as the role's own vars template them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles/container_engine"
SCRIPT = (ROLE / "files/probe.sh").read_text()
VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())

FAKE_SYSTEMCTL = """#!/bin/sh
case "$1" in
  is-enabled) [ -n "$FAKE_ENABLED" ] && echo "$FAKE_ENABLED"; exit "${FAKE_ENABLED_RC:-0}" ;;
  is-active) echo "$FAKE_ACTIVE"; [ "$FAKE_ACTIVE" = active ] ;;
esac
"""
# dpkg-query -W -f '${db:Status-Abbrev}' PKG: FAKE_STATUS_<pkg> is its status, else unknown
FAKE_DPKG_QUERY = """#!/bin/sh
pkg=$4
eval "status=\\${FAKE_STATUS_$(echo "$pkg" | tr -c 'a-z0-9\\n' _)}"
if [ -z "$status" ]; then echo "dpkg-query: no packages found matching $pkg" >&2; exit 1; fi
printf '%s' "$status"
"""
# rpm -q --quiet PKG: installed when named in FAKE_RPMS
FAKE_RPM = """#!/bin/sh
case " $FAKE_RPMS " in *" $3 "*) exit 0 ;; esac
exit 1
"""
CONVERGED = {"FAKE_ENABLED": "enabled", "FAKE_ACTIVE": "active"}


def probe(tmp_path: Path, packages=(), *, want="true", source="true", dockerd=True,
          rpm=False, **env: str) -> dict:  # fmt: skip
    """The probe's JSON. dockerd: whether the second of two dockerd paths exists; rpm: a
    node with rpm and no dpkg-query."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tools = {
        "systemctl": FAKE_SYSTEMCTL,
        **({"rpm": FAKE_RPM} if rpm else {"dpkg-query": FAKE_DPKG_QUERY}),
    }
    for name, text in tools.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    for name in ("sed", "tr", "echo"):  # PATH is bindir only: no dpkg-query on an rpm node
        if not (bindir / name).exists():
            (bindir / name).symlink_to(shutil.which(name))
    (tmp_path / "usr-sbin-dockerd").unlink(missing_ok=True)
    if dockerd:
        (tmp_path / "usr-sbin-dockerd").touch()
    paths = f"{tmp_path}/usr-bin-dockerd:{tmp_path}/usr-sbin-dockerd"
    proc = subprocess.run(
        ["/bin/sh", "-c", SCRIPT, "probe", want, source, paths, *packages],
        env={"PATH": str(bindir), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def test_converged_node_has_nothing_to_do(tmp_path):
    assert probe(tmp_path, ["pigz"], FAKE_STATUS_pigz="ii ", **CONVERGED) == {
        "dockerd": True,
        "enabled": True,
        "running": True,
        "missing": [],
        "todo": [],
    }


def test_packages_installed_held_known_and_unknown(tmp_path):
    seen = probe(
        tmp_path,
        ["docker-compose", "pigz", "held", "nowhere"],
        FAKE_STATUS_pigz="ii ",
        FAKE_STATUS_held="hi ",  # on hold, installed
        FAKE_STATUS_docker_compose="un ",  # known, not installed
        **CONVERGED,
    )
    assert seen["missing"] == ["docker-compose", "nowhere"]
    assert seen["todo"] == ["extra packages"]


def test_packages_on_an_rpm_node(tmp_path):
    seen = probe(tmp_path, ["pigz", "jq"], rpm=True, FAKE_RPMS="pigz", **CONVERGED)
    assert (seen["missing"], seen["todo"]) == (["jq"], ["extra packages"])


def test_a_package_name_cannot_break_the_json(tmp_path):
    assert probe(tmp_path, ['odd"\\name'], **CONVERGED)["missing"] == ['odd"\\name']


@pytest.mark.parametrize(
    ("env", "enabled", "running"),
    [
        ({"FAKE_ACTIVE": "inactive"}, True, False),
        ({"FAKE_ACTIVE": "failed"}, True, False),
        ({"FAKE_ENABLED": "disabled", "FAKE_ENABLED_RC": "1"}, False, True),
        ({"FAKE_ENABLED": "", "FAKE_ENABLED_RC": "1", "FAKE_ACTIVE": "inactive"}, False, False),
        ({"FAKE_ENABLED": "indirect"}, False, True),  # as systemd_service judges it
        ({"FAKE_ENABLED": "alias"}, False, True),
        ({"FAKE_ENABLED": "static"}, True, True),
    ],
)
def test_a_service_not_enabled_or_not_running_is_to_do(tmp_path, env, enabled, running):
    seen = probe(tmp_path, **{**CONVERGED, **env})
    assert (seen["enabled"], seen["running"]) == (enabled, running)
    assert seen["todo"] == ([] if enabled and running else ["service"])


def test_activating_counts_as_started(tmp_path):
    assert probe(tmp_path, **{**CONVERGED, "FAKE_ACTIVE": "activating"})["todo"] == []


def test_no_dockerd_is_an_install(tmp_path):
    seen = probe(tmp_path, dockerd=False, FAKE_ENABLED_RC="1", FAKE_ACTIVE="inactive")
    assert not seen["dockerd"]
    assert seen["todo"] == ["install", "service"]


def test_a_disabled_engine_that_should_stay_disabled_is_left_alone(tmp_path):
    stopped = {"FAKE_ENABLED": "disabled", "FAKE_ENABLED_RC": "1", "FAKE_ACTIVE": "inactive"}
    assert probe(tmp_path, want="false", **stopped)["todo"] == []
    assert probe(tmp_path, want="false", **CONVERGED)["todo"] == ["service"]  # to be disabled


def test_a_source_without_packages_for_the_distribution_is_checked_even_when_installed(tmp_path):
    """RHEL has no distribution Docker: engine.yml's first task names the accepted sources."""
    assert probe(tmp_path, source="false", **CONVERGED)["todo"] == ["source"]
    everything = probe(tmp_path, ["pigz"], source="false", dockerd=False, FAKE_ACTIVE="inactive")
    assert everything["todo"] == ["source", "install", "extra packages", "service"]


def argv(enabled: bool = True, source: str = "distro", family: str = "Debian", extra=()):
    """_container_engine_probe_argv as Ansible templates it from the role's vars."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader()  # lookup('ansible.builtin.file') needs the collection loader

    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in VARS.items()}
    variables.update(
        container_engine_enabled=enabled,
        container_engine_source=source,
        container_engine_extra_packages=list(extra),
        ansible_os_family=family,
        ansible_distribution="Debian" if family == "Debian" else "Rocky",
        ansible_architecture="x86_64",
        ansible_search_path=[str(ROLE)],  # where lookup('file') finds files/probe.sh
    )
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template("{{ _container_engine_probe_argv }}"))


# importing ansible.template has set up the collection finder already; the loader says so
@pytest.mark.filterwarnings("ignore:AnsibleCollectionFinder has already been configured")
def test_the_role_runs_the_probe_with_its_knobs():
    assert argv(extra=["pigz"]) == [
        "sh", "-c", SCRIPT.rstrip("\n"), "probe", "true", "true",
        "/usr/bin/dockerd:/usr/sbin/dockerd", "pigz",
    ]  # fmt: skip
    assert argv(enabled=False)[4:6] == ["false", "true"]
    assert argv(source="distro", family="RedHat")[4:6] == ["true", "false"]
    assert argv(source="docker", family="RedHat")[4:6] == ["true", "true"]
