"""gpunode.sim.rerun (`gpunode sim playbook`, what ./scripts/demo runs site.yml with): a
provisioning run on nodes provisioned before with the same inputs must change nothing.

The end-to-end cases run the real ansible-playbook with the real callback on local "nodes"
(connection local), a provisioning play (playbooks/provision.yml, as in the project) and a
second play whose changes do not count; the node markers are a dict here. "Drift" (a node
that is no longer as provisioned) is a changed_when reading $DRIFT, which is no input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from gpunode.cli.main import main
from gpunode.sim import rerun

PROVISION = """\
- name: Provision
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Drifted file
      ansible.builtin.command: "true"
      check_mode: false
      changed_when: inventory_hostname in lookup('env', 'DRIFT').split(',')
    - name: Steady
      ansible.builtin.command: "true"
      check_mode: false
      changed_when: false
    - name: Looped
      ansible.builtin.command: "true"
      check_mode: false
      loop: [1, 2]
      changed_when: item == 2 and inventory_hostname in lookup('env', 'DRIFT').split(',')
    - name: Skipped
      ansible.builtin.command: "true"
      when: false
"""
SITE = """\
- name: Provision
  ansible.builtin.import_playbook: playbooks/provision.yml
- name: Validate
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Write the report
      ansible.builtin.command: "true"
      check_mode: false
      changed_when: true
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks/provision.yml").write_text(PROVISION)
    (tmp_path / "site.yml").write_text(SITE)
    (tmp_path / "roles/r/tasks").mkdir(parents=True)
    (tmp_path / "roles/r/tasks/main.yml").write_text("---\n")
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars/all.yml").write_text(
        yaml.safe_dump(
            {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        )
    )
    hosts = {n: {"gpunode_sim_profile": "a100x4"} for n in ("n1", "n2")}
    (inv / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}})
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CALLBACKS_ENABLED", raising=False)
    monkeypatch.delenv("ANSIBLE_CALLBACK_PLUGINS", raising=False)
    monkeypatch.setenv("ANSIBLE_NOCOLOR", "1")
    return tmp_path


class Markers(dict):
    def read(self, names):
        return {n: self.get(n) for n in names}

    def write(self, names, value):
        self.update(dict.fromkeys(names, value))


def run(project: Path, markers: Markers, *args: str, drift: str = "", cmd: str | None = None):
    os.environ["DRIFT"] = drift
    lines: list[str] = []
    rc = rerun.run_playbook(
        project / "inv/hosts.yml",
        ["site.yml", *args],
        project,
        playbook_cmd=cmd or str(Path(sys.executable).parent / "ansible-playbook"),
        markers_read=markers.read,
        markers_write=markers.write,
        out=lines.append,
    )
    return rc, lines


def test_a_rerun_that_changes_a_provisioned_node_fails_naming_host_and_task(project):
    markers = Markers()
    # first run: nothing provisioned before, changes allowed (the other play's always)
    rc, lines = run(project, markers, drift="n1")
    assert (rc, lines) == (
        0,
        ["provisioned n1, n2 for the first time with these inputs; a second run must change "
         "nothing there"],
    )  # fmt: skip
    assert set(markers) == {"n1", "n2"} and len(set(markers.values())) == 1
    first = dict(markers)

    # the same inputs again, n2 drifted: its changed tasks of the provisioning play only
    rc, lines = run(project, markers, drift="n2")
    assert (rc, lines) == (
        1,
        ["not idempotent: provisioning changed 2 task(s) on nodes provisioned before with the "
         "same inputs: n2: Drifted file; n2: Looped"],
    )  # fmt: skip
    assert markers == first

    # nothing drifted: passes (the validation play's change does not count)
    rc, lines = run(project, markers)
    assert (rc, lines) == (
        0,
        ["provisioning changed nothing on n1, n2 (provisioned before with the same inputs)"],
    )

    # check mode is held to it as well, and writes no marker
    rc, lines = run(project, markers, "--check", drift="n1")
    assert rc == 1
    assert lines == [
        "not idempotent: provisioning would change 2 task(s) on nodes provisioned before with "
        "the same inputs: n1: Drifted file; n1: Looped"
    ]
    assert markers == first


def test_other_inputs_are_a_first_run(project):
    markers = Markers()
    assert run(project, markers)[0] == 0
    first = dict(markers)
    # another -e: may change things, and the nodes are marked with the new inputs
    rc, lines = run(project, markers, "-e", "x=1", drift="n1,n2")
    assert rc == 0 and lines[0].startswith("provisioned n1, n2 for the first time"), lines
    assert markers["n1"] != first["n1"]
    # an edited role: the same (the inputs' digest below)
    (project / "roles/r/tasks/main.yml").write_text("---\n# edited\n")
    rc, lines = run(project, markers, "-e", "x=1", drift="n1")
    assert rc == 0 and lines[0].startswith("provisioned n1, n2 for the first time"), lines


def test_a_failed_run_is_its_own_status_and_marks_nothing(project, tmp_path):
    fake = tmp_path / "fake-playbook"
    fake.write_text("#!/bin/sh\nexit 4\n")
    fake.chmod(0o755)
    markers = Markers()
    assert run(project, markers, cmd=str(fake)) == (4, [])
    assert markers == {}


def test_no_record_from_the_callback_is_an_error_not_a_pass(project, tmp_path):
    fake = tmp_path / "fake-playbook"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    with pytest.raises(rerun.RerunError, match=r"the change recorder .* wrote nothing"):
        run(project, Markers(), cmd=str(fake))


def test_fingerprint_follows_the_inputs(project, tmp_path):
    inv = project / "inv/hosts.yml"
    base = rerun.inputs_digest(project, inv)
    assert rerun.inputs_digest(project, inv) == base
    # outputs beside the inventory and Python caches are no inputs
    (project / "inv/reports").mkdir()
    (project / "inv/reports/report.json").write_text("{}")
    (project / "roles/r/tasks/__pycache__").mkdir()
    (project / "roles/r/tasks/__pycache__/x.pyc").write_text("")
    assert rerun.inputs_digest(project, inv) == base
    (project / "inv/group_vars/all.yml").write_text("x: 1\n")
    assert rerun.inputs_digest(project, inv) != base
    base = rerun.inputs_digest(project, inv)
    (project / "roles/r/tasks/main.yml").write_text("---\n# edited\n")
    assert rerun.inputs_digest(project, inv) != base

    opts = {"extra_vars": ["@vars.yml"], "tags": ["all"], "skip_tags": []}
    (project / "vars.yml").write_text("a: 1\n")
    one = rerun.fingerprint(base, opts, project)
    (project / "vars.yml").write_text("a: 2\n")  # -e @FILE counts by content
    assert rerun.fingerprint(base, opts, project) != one
    assert rerun.fingerprint(base, {**opts, "tags": ["driver"]}, project) != one


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("not json", "cannot be read"),
        (json.dumps({"schema": "other"}), "is not a gpunode.sim.changes/v1 document"),
        (
            json.dumps(
                {
                    "schema": rerun.SCHEMA,
                    "check": False,
                    "options": {},
                    "plays": [{"file": "x", "hosts": {"n1": "task"}}],
                }
            ),
            "is not a gpunode.sim.changes/v1 document",
        ),
    ],
)
def test_a_bad_record_is_one_line(tmp_path, doc, message):
    path = tmp_path / "changes.json"
    path.write_text(doc)
    with pytest.raises(rerun.RerunError, match=message) as exc:
        rerun.read_log(path)
    assert "\n" not in str(exc.value)


def test_cli_inventory_given_twice_is_bad_input(capsys):
    assert main(["sim", "playbook", "site.yml", "-i", "other.yml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpunode: error: sim playbook: give the inventory once, before the")
    assert err.count("\n") == 1
