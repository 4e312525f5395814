"""plugins/action/direct_command.py: the roles' gpunode calls without a module run each.

One ansible-playbook run (the project's ansible.cfg, localhost, the local connection)
shows what the action returns and what it refuses; the rest checks that the roles and
playbooks use it for every gpunode call on a node, and that its documentation
(plugins/modules/direct_command.py) names exactly the arguments it takes."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
FQCN = "gpunode.gpunode.direct_command"
BIN = Path(sys.executable).parent

PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    out: {{}}
  tasks:
    - name: quoting
      gpunode.gpunode.direct_command:
        argv: [printf, "%s|", "a b", "$(touch {pwn})", "; touch {pwn}", "'q'", "`id`"]
      register: quoting
      changed_when: false
    - name: stdin
      gpunode.gpunode.direct_command:
        argv: [cat]
        stdin: "line one\\nline two"
      register: stdin
      changed_when: false
    - name: no stdin
      gpunode.gpunode.direct_command:
        argv: [cat]
      register: nostdin
      changed_when: false
    - name: streams
      gpunode.gpunode.direct_command:
        argv: [sh, -c, "echo out; echo err >&2; exit 3"]
      register: streams
      changed_when: false
      # kept to compare: the test asserts its rc 3; that a non-zero rc fails the task is
      # the "failures" block's (rescued, asserted)
      failed_when: false
    - name: environment
      gpunode.gpunode.direct_command:
        argv: [sh, -c, 'printf %s "$GN_TEST"']
      environment:
        GN_TEST: "a b'c $HOME"
      register: env
      changed_when: false
    - name: removes absent
      gpunode.gpunode.direct_command:
        argv: [touch, "{ran}"]
        removes: "{absent}"
      register: absent
      changed_when: false
    - name: removes present
      gpunode.gpunode.direct_command:
        argv: [sh, -c, "echo ran"]
        removes: "{present}"
      register: present
      changed_when: false
    - name: removes, a path no shell may read
      gpunode.gpunode.direct_command:
        argv: [touch, "{ran}"]
        removes: "{absent} $(touch {pwn2}); touch {pwn2}"
      register: hostile
      changed_when: false
    - name: removes a dangling link
      gpunode.gpunode.direct_command:
        argv: [sh, -c, "echo ran"]
        removes: "{dangling}"
      register: dangling
      changed_when: false
    - name: check mode
      gpunode.gpunode.direct_command:
        argv: [touch, "{checked}"]
      check_mode: true
      register: checked
      changed_when: false
    - name: failures
      block:
        - name: a failing command
          gpunode.gpunode.direct_command:
            argv: [sh, -c, "echo why >&2; exit 5"]
          changed_when: false
      rescue:
        - name: keep it
          ansible.builtin.set_fact:
            failing: "{{{{ ansible_failed_result }}}}"
    - name: lost output
      block:
        - name: a command whose output never ends (its shell dies before the end line)
          gpunode.gpunode.direct_command:
            argv: [sh, -c, 'echo ran >> {lost}; echo partial; kill -9 $PPID']
          changed_when: false
      rescue:
        - name: keep it
          ansible.builtin.set_fact:
            lost: "{{{{ ansible_failed_result }}}}"
    - name: refusals
      block:
        - name: an empty argv
          gpunode.gpunode.direct_command:
            argv: []
          changed_when: false
      rescue:
        - name: keep it
          ansible.builtin.set_fact:
            empty: "{{{{ ansible_failed_result }}}}"
    - name: unknown options
      block:
        - name: an option it does not take
          gpunode.gpunode.direct_command:
            argv: ["true"]
            chdir: /tmp
          changed_when: false
      rescue:
        - name: keep it
          ansible.builtin.set_fact:
            unknown: "{{{{ ansible_failed_result }}}}"
    - name: write what came back
      ansible.builtin.copy:
        dest: "{results}"
        content: >-
          {{{{ dict(quoting=quoting, stdin=stdin, nostdin=nostdin, streams=streams, env=env,
                   absent=absent, present=present, dangling=dangling, hostile=hostile,
                   checked=checked,
                   failing=failing, lost=lost,
                   empty=empty, unknown=unknown) | to_json }}}}
        mode: "0600"
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory, collections_path):
    tmp = tmp_path_factory.mktemp("direct")
    paths = {
        "pwn": tmp / "pwned",
        "pwn2": tmp / "pwned-by-removes",
        "ran": tmp / "ran",
        "absent": tmp / "absent",
        "present": tmp / "present",
        "dangling": tmp / "dangling",
        "checked": tmp / "checked",
        "lost": tmp / "lost-runs",
        "results": tmp / "results.json",
    }
    paths["present"].write_text("")
    paths["dangling"].symlink_to(tmp / "nowhere")
    playbook = tmp / "play.yml"
    playbook.write_text(PLAYBOOK.format(**paths))
    env = {
        **os.environ,
        # no ansible.cfg: the action is found in the installed collection
        "ANSIBLE_CONFIG": str(tmp / "none.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
        "ANSIBLE_INVENTORY": "localhost,",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        env=env, cwd=tmp, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    paths["output"] = proc.stdout + proc.stderr
    return json.loads(paths["results"].read_text()), paths


def test_each_argument_is_one_word_no_shell_reads_it(results):
    got, paths = results
    assert (
        got["quoting"]["stdout"] == f"a b|$(touch {paths['pwn']})|; touch {paths['pwn']}|'q'|`id`|"
    )
    assert got["quoting"]["rc"] == 0
    assert not paths["pwn"].exists()


def test_standard_input_is_the_commands(results):
    got, _ = results
    assert got["stdin"]["stdout"] == "line one\nline two"
    assert got["stdin"]["stdout_lines"] == ["line one", "line two"]
    assert got["nostdin"]["stdout"] == ""


def test_stdout_stderr_and_rc_are_what_command_returns(results):
    got, _ = results
    streams = got["streams"]
    assert (streams["rc"], streams["stdout"], streams["stderr"]) == (3, "out", "err")
    assert streams["cmd"] == ["sh", "-c", "echo out; echo err >&2; exit 3"]
    failing = got["failing"]
    assert failing["failed"] is True
    assert (failing["rc"], failing["stderr"], failing["msg"]) == (5, "why", "non-zero return code")


def test_the_tasks_environment_reaches_the_command(results):
    got, _ = results
    assert got["env"]["stdout"] == "a b'c $HOME"


def test_removes_runs_it_only_when_the_path_exists(results):
    got, paths = results
    assert not paths["ran"].exists()
    assert got["absent"]["rc"] == 0
    assert got["absent"]["stdout"] == f"skipped, since {paths['absent']} does not exist"
    assert "does not exist" in got["absent"]["msg"]
    assert got["present"]["stdout"] == "ran"
    assert got["dangling"]["stdout"] == "ran"  # a link counts, as for command's removes
    # the path is one word to the test, never a command
    assert got["hostile"]["stdout"].startswith("skipped, since ")
    assert not paths["pwn2"].exists()


def test_output_without_its_end_line_is_run_again_then_fails_in_one_line(results):
    """The end line proves the output arrived whole: without it (here the host's shell dies
    before printing it, as an output lost on the way looks) the command is run again once,
    with a warning, then the task fails saying so, never parsing a partial output."""
    got, paths = results
    assert paths["lost"].read_text() == "ran\nran\n"  # run twice
    lost = got["lost"]
    assert lost["failed"] is True
    assert lost["msg"].startswith("the connection lost sh's output 2 times (no end line")
    assert "partial" in lost["msg"]
    assert "lost on the way); running it again" in paths["output"]


@pytest.mark.parametrize(
    ("stdout", "want"),
    [
        ("json\n\ngpunode-direct-command-end 0\n", ("json", 0)),
        ("\ngpunode-direct-command-end 3\n", ("", 3)),
        ("a\r\nb\r\n\r\ngpunode-direct-command-end 137\r\n", ("a\r\nb", 137)),
        ("", None),  # the output lost whole
        ("json\n", None),  # cut before the end line
        ("json\ngpunode-direct-command-end", None),
        ("json\ngpunode-direct-command-end x\n", None),
        ("gpunode-direct-command-end 0\nmore\n", None),  # not at the end
    ],
)
def test_the_end_line_is_found_only_at_the_end(stdout, want):
    spec = importlib.util.spec_from_file_location("direct_command_action",
                                                  ROOT / "plugins/action/direct_command.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.split_end(stdout) == want


def test_check_mode_runs_nothing(results):
    got, paths = results
    assert got["checked"]["skipped"] is True
    assert not paths["checked"].exists()


def test_bad_arguments_are_one_line_naming_them(results):
    got, _ = results
    assert got["empty"]["msg"] == "argv must name a command; got []"
    assert "chdir" in got["unknown"]["msg"]
    assert "Traceback" not in json.dumps(got)


def _tasks(node):
    """Every task of a tasks/playbook file, blocks and plays opened."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(k in node for k in ("tasks", "pre_tasks", "post_tasks", "handlers")):
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                yield from _tasks(node.get(key) or [])
            return
        yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key) or [])


def _files():
    return sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
                   *ROOT.glob("playbooks/*.yml"), ROOT / "site.yml"])  # fmt: skip


# ansible.builtin.command stays where no module run is saved on a node or a command's own
# feature is used: the controller's runs (once per play), the operator's drain strings
# (`cmd`, split as command splits them), and system commands of phases the simulator
# never reaches (dnf, dkms, the initramfs handler), which keep Ansible's own module.
COMMAND_LEFT = {
    ("roles/gpunode_install/tasks/build.yml", "Build the gpunode wheel on the controller"),
    ("roles/gpu_preflight/tasks/validate.yml", "Run gpunode provision validate on the controller (all hosts at once)"),
    ("roles/gpu_mig/tasks/change.yml", "Drain the node"),
    ("roles/gpu_mig/tasks/undrain.yml", "Undrain the node"),
    ("roles/nvidia_driver/tasks/install.yml", "Enable the dnf module stream"),
    ("roles/nvidia_driver/tasks/kernel.yml", "Build the module with DKMS for the running kernel"),
    ("roles/nvidia_driver/handlers/main.yml", "Rebuild the initramfs"),
    ("playbooks/upgrade-driver.yml", "Drain the node"),
    ("playbooks/upgrade-driver.yml", "Undrain the node"),
    ("playbooks/validate.yml", "Build the report"),
}  # fmt: skip


def test_gpunode_calls_on_the_nodes_are_direct_commands():
    left, direct = set(), []
    for path in _files():
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            rel = str(path.relative_to(ROOT))
            if "ansible.builtin.command" in task or "command" in task:
                left.add((rel, task.get("name")))
            if FQCN in task:
                direct.append((rel, task))
    assert left == COMMAND_LEFT
    assert len(direct) >= 20
    for rel, task in direct:
        # as ansible-lint's no-changed-when asks of command: each says when it changed
        assert "changed_when" in task, (rel, task.get("name"))
        assert set(task[FQCN]) <= {"argv", "stdin", "removes"}, (rel, task.get("name"))


def test_the_documentation_names_the_actions_arguments():
    spec = importlib.util.spec_from_file_location(
        "direct_command_action", ROOT / "plugins/action/direct_command.py"
    )
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    tree = ast.parse((ROOT / "plugins/modules/direct_command.py").read_text())
    doc = next(
        node.value.value for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "DOCUMENTATION"
    )  # fmt: skip
    options = yaml.safe_load(doc)["options"]
    assert set(options) == set(action.ARGUMENT_SPEC)
    for name, option in options.items():
        want = action.ARGUMENT_SPEC[name]
        assert option["type"] == want["type"], name
        assert option.get("required", False) == want.get("required", False), name
        assert option.get("elements") == want.get("elements"), name


def test_no_config_names_where_code_is():
    """The roles and plugins are found in the installed collection only (issue 36): neither
    the repository's ansible.cfg nor molecule's configuration points Ansible at code."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    paths = {"roles_path", "action_plugins", "library", "filter_plugins", "callback_plugins",
             "module_utils", "collections_path", "collections_paths", "lookup_plugins"}  # fmt: skip
    assert paths.isdisjoint(cfg["defaults"]), sorted(paths & set(cfg["defaults"]))
    molecule = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())
    env = molecule["provisioner"].get("env", {})
    assert not [k for k in env if k.startswith("ANSIBLE_")], env
