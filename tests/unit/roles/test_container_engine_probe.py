"""container_engine's probe: the one module run the role costs on a node where Docker is
installed, enabled, running and has its extra packages. The probe script of
roles/container_engine/vars/main.yml runs here with a fake systemctl and dpkg-query on
PATH, and the role's own expressions (Ansible's templating) turn its output into what
engine.yml has to do (`_container_engine_todo`): nothing on such a node, and each missing
piece otherwise."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles/container_engine"
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


def probe(tmp_path: Path, packages: list[str], **env: str) -> list[str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("dpkg-query", FAKE_DPKG_QUERY)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    proc = subprocess.run(
        ["sh", "-c", VARS["_container_engine_probe_script"], "probe", *packages],
        env={"PATH": f"{bindir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stderr == ""
    return proc.stdout.splitlines()


def todo(lines: list[str], enabled: bool = True, source: str = "distro", family: str = "Debian"):
    """_container_engine_todo as Ansible templates it from the role's vars."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in VARS.items()}
    variables.update(
        _container_engine_probe={"stdout_lines": lines},
        container_engine_enabled=enabled,
        container_engine_source=source,
        ansible_os_family=family,
        ansible_distribution="Debian" if family == "Debian" else "Rocky",
        ansible_architecture="x86_64",
    )
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template("{{ _container_engine_todo }}"))


HERE = any(os.path.exists(p) for p in ("/usr/bin/dockerd", "/usr/sbin/dockerd"))
DOCKERD = "present" if HERE else "absent"  # this machine's: the probe looks at absolute paths


def test_probe_reports_service_state_and_missing_packages(tmp_path):
    lines = probe(
        tmp_path,
        ["docker-compose", "pigz", "held"],
        FAKE_ENABLED="enabled",
        FAKE_ACTIVE="active",
        FAKE_STATUS_pigz="ii ",
        FAKE_STATUS_held="hi ",  # on hold, installed
        FAKE_STATUS_docker_compose="un ",  # known, not installed
    )
    assert lines == [
        f"dockerd={DOCKERD}",
        "enabled=0:enabled",
        "active=active",
        "missing=docker-compose",
    ]


def test_probe_of_a_node_without_the_service(tmp_path):
    lines = probe(tmp_path, ["pigz"], FAKE_ENABLED_RC="1", FAKE_ACTIVE="inactive")
    assert lines[1:] == ["enabled=1:", "active=inactive", "missing=pigz"]


CONVERGED = ["dockerd=present", "enabled=0:enabled", "active=active", "missing="]


def test_converged_node_has_nothing_to_do():
    assert todo(CONVERGED) == []


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({0: "dockerd=absent"}, ["install"]),
        ({3: "missing=docker-compose pigz"}, ["extra packages"]),
        ({2: "active=inactive"}, ["service"]),
        ({2: "active=failed"}, ["service"]),
        ({1: "enabled=1:disabled"}, ["service"]),
        ({1: "enabled=0:indirect"}, ["service"]),  # as systemd_service judges it
        ({1: "enabled=0:alias"}, ["service"]),
    ],
)
def test_each_missing_piece_is_something_to_do(change, expect):
    lines = [change.get(i, line) for i, line in enumerate(CONVERGED)]
    assert todo(lines) == expect


def test_activating_counts_as_started():
    assert todo([*CONVERGED[:2], "active=activating", CONVERGED[3]]) == []


def test_a_disabled_engine_that_should_stay_disabled_is_left_alone():
    lines = ["dockerd=present", "enabled=1:disabled", "active=inactive", "missing="]
    assert todo(lines, enabled=False) == []
    assert todo(CONVERGED, enabled=False) == ["service"]  # enabled: to be disabled


def test_a_source_without_packages_for_the_distribution_is_checked_even_when_installed():
    """RHEL has no distribution Docker: engine.yml's first task names the accepted sources."""
    assert todo(CONVERGED, source="distro", family="RedHat") == ["source"]
    assert todo(CONVERGED, source="docker", family="RedHat") == []
