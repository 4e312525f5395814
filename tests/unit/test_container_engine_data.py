"""container_engine's per-distribution decisions (roles/container_engine/vars/main.yml):
which packages and which Docker repository each supported distribution gets. The role's
own selection expressions are evaluated here with the facts Ansible would give."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

VARS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "roles/container_engine/vars/main.yml").read_text()
)
DEFAULTS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "roles/container_engine/defaults/main.yml").read_text()
)
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)


def _expr(name: str) -> str:
    text = VARS[name].strip()
    assert text.startswith("{{") and text.endswith("}}"), name
    return text[2:-2]


def plan(distribution: str, os_family: str, source: str, arch: str = "x86_64"):
    facts = {
        "ansible_distribution": distribution,
        "ansible_os_family": os_family,
        "ansible_architecture": arch,
        "container_engine_source": source,
        "_container_engine_sources": VARS["_container_engine_sources"],
    }
    facts["_container_engine_family"] = ENV.compile_expression(_expr("_container_engine_family"))(
        **facts
    )
    result = ENV.compile_expression(_expr("_container_engine_plan"))(**facts)
    arch_name = ENV.compile_expression(_expr("_container_engine_dpkg_arch"))(**facts)
    return result, arch_name


def test_default_is_the_distributions_own_package():
    assert DEFAULTS["container_engine_source"] == "distro"
    for distro, family in (("Debian", "Debian"), ("Ubuntu", "Debian")):
        result, _ = plan(distro, family, "distro")
        assert result == {"packages": ["docker.io"]}


@pytest.mark.parametrize(
    ("distro", "family", "path"),
    [
        ("Debian", "Debian", "debian"),
        ("Ubuntu", "Debian", "ubuntu"),
        ("RedHat", "RedHat", "rhel"),
        ("Rocky", "RedHat", "rhel"),
        ("AlmaLinux", "RedHat", "rhel"),
    ],
)
def test_dockers_repository_per_distribution(distro, family, path):
    result, _ = plan(distro, family, "docker")
    assert result["repo_url"] == f"https://download.docker.com/linux/{path}"
    assert result["key_url"] == f"https://download.docker.com/linux/{path}/gpg"
    assert result["packages"] == ["docker-ce", "docker-ce-cli", "containerd.io"]
    assert result["keyring"].startswith("/etc/")


def test_rhel_has_no_distribution_docker():
    # the role's assert then names the sources that exist (docker)
    assert plan("Rocky", "RedHat", "distro")[0] is None


def test_unknown_distribution_or_source_gives_no_plan():
    assert plan("Arch", "Archlinux", "distro")[0] is None
    assert plan("Debian", "Debian", "snap")[0] is None


@pytest.mark.parametrize(("arch", "deb"), [("x86_64", "amd64"), ("aarch64", "arm64")])
def test_apt_architecture_names(arch, deb):
    assert plan("Debian", "Debian", "docker", arch)[1] == deb
