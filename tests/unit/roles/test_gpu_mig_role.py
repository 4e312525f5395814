"""The gpu_mig role's pure parts, rendered by Ansible's own templar: the layouts file it
writes (mig-parted v1 around the inventory's mapping, or the controller's file as it is)
and the gpunode commands it runs (the dry run reads stdin in check mode)."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

from gpunode.mig.config import document

ROLE = Path(__file__).resolve().parents[3] / "roles" / "gpu_mig"
LAYOUTS = {
    "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "mixed": [
        {
            "devices": [0],
            "mig-enabled": True,
            "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
        },
        {"devices": [1, 2, 3], "mig-enabled": False},
    ],
}


@functools.cache
def _plugins() -> None:
    """Ansible's plugin loader (lookups such as the role's template, filters), once; another
    test of the session may have set up its collection finder already, which is fine."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured")
        init_plugin_loader()


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def render(expr: str, check_mode: bool = False, **inventory):
    _plugins()
    role_vars = {}
    for part in ("defaults", "vars"):
        role_vars.update(_trusted(yaml.safe_load((ROLE / part / "main.yml").read_text())))
    variables = {
        **role_vars,
        "ansible_check_mode": check_mode,
        "ansible_search_path": [str(ROLE)],
        "role_path": str(ROLE),
        **inventory,
    }
    return Templar(loader=DataLoader(), variables=variables).template(_trusted(expr))


def test_inventory_layouts_are_written_as_mig_parted_v1():
    text = render("{{ _gpu_mig_content }}", gpu_mig_config="mixed", gpu_mig_configs=LAYOUTS)
    assert text.startswith("# ")
    # the document gpunode writes and reads around the same layouts (mig.config.document)
    assert yaml.safe_load(text) == document(LAYOUTS) == {"version": "v1", "mig-configs": LAYOUTS}
    assert list(yaml.safe_load(text)["mig-configs"]) == ["all-1g.10gb", "mixed"]  # order kept


def test_a_controller_file_is_written_as_it_is(tmp_path):
    own = tmp_path / "mig-parted.yaml"
    own.write_text("# the site's own file\nversion: v1\nmig-configs:\n  a: []\n")
    text = render("{{ _gpu_mig_content }}", gpu_mig_config="a", gpu_mig_config_file=str(own))
    assert text.rstrip("\n") == own.read_text().rstrip("\n")


def test_the_dry_run_reads_stdin_in_check_mode_only():
    real = render("{{ _gpu_mig_plan_argv }}", gpu_mig_config="mixed")
    assert real == [
        "/usr/local/bin/gpunode", "mig", "apply", "--config-file", "/etc/gpunode/mig-config.yaml",
        "--config", "mixed", "--dry-run", "--json",
    ]  # fmt: skip
    check = render("{{ _gpu_mig_plan_argv }}", check_mode=True, gpu_mig_config="mixed")
    assert check[4] == "/dev/stdin" and check[5:] == real[5:]


def test_apply_and_assert_read_the_written_file():
    apply = render("{{ _gpu_mig_apply_argv }}", check_mode=True, gpu_mig_config="mixed")
    assert apply[1:] == [
        "mig", "apply", "--config-file", "/etc/gpunode/mig-config.yaml", "--config", "mixed", "--json",
    ]  # fmt: skip
    check = render("{{ _gpu_mig_assert_argv }}", gpu_mig_config="mixed")
    assert check[1:] == [
        "mig", "assert", "--config-file", "/etc/gpunode/mig-config.yaml", "--config", "mixed",
    ]  # fmt: skip


def test_the_cli_follows_gpunode_install_bin_dir():
    argv = render("{{ gpu_mig_cli }}", gpunode_install_bin_dir="/opt/bin")
    assert argv == ["/opt/bin/gpunode"]


def test_the_boot_unit_applies_the_layout_before_the_gpus_users():
    unit = render(
        "{{ lookup('ansible.builtin.template', 'gpunode-mig.service.j2') }}",
        gpu_mig_config="mixed",
        gpu_mig_stop_services=["nvidia-persistenced", "dcgm-exporter.service"],
    )
    lines = unit.splitlines()
    assert "ExecStart=/usr/local/bin/gpunode mig apply --config-file /etc/gpunode/mig-config.yaml " \
        "--config mixed --json" in lines  # fmt: skip
    before = next(line for line in lines if line.startswith("Before=")).split("=", 1)[1].split()
    assert {"gpunode-refresh.service", "docker.service", "containerd.service", "kubelet.service",
            "nvidia-persistenced.service", "dcgm-exporter.service"} <= set(before)  # fmt: skip
    assert "WantedBy=multi-user.target" in lines


def test_the_role_strips_gpunodes_one_error_prefix():
    """The role's refusals show gpunode's line without its prefix: the one prefix every
    subcommand prints (util.command.ERROR_PREFIX), stripped in every task that shows it."""
    import re

    from gpunode.util.command import ERROR_PREFIX

    stripped = [
        m
        for f in sorted((ROLE / "tasks").glob("*.yml"))
        for m in re.findall(r"regex_replace\('(\^gpunode[^']*)', ''\)", f.read_text())
    ]
    assert len(stripped) == 3
    assert set(stripped) == {"^" + ERROR_PREFIX}  # the prefix has no regex metacharacters
