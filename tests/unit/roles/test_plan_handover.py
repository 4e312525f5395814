"""The CUDA plan nvidia_driver's plan run makes for cuda_toolkit (playbooks/provision.yml):
handed on only when the driver role changes nothing that plan read, taken only when it is ok
and made with exactly cuda_toolkit's arguments. The roles' own expressions
(roles/*/vars/main.yml) are evaluated here with the values Ansible would give them."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import jinja2
import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
DRIVER = yaml.safe_load((ROLES / "nvidia_driver/vars/main.yml").read_text())
CUDA = yaml.safe_load((ROLES / "cuda_toolkit/vars/main.yml").read_text())
CUDA_DEFAULTS = yaml.safe_load((ROLES / "cuda_toolkit/defaults/main.yml").read_text())

ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)
ENV.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
ENV.filters["regex_replace"] = lambda v, pattern, repl: re.sub(pattern, repl, v)
ENV.tests["skipped"] = lambda r: isinstance(r, dict) and bool(r.get("skipped"))


def value(vars_: dict, name: str, context: dict):
    """A role variable as Ansible templates it: its expression, with the role variables it
    names templated the same way (lazily, as Ansible does)."""
    text = vars_[name].strip()
    assert text.startswith("{{") and text.endswith("}}"), name
    return ENV.compile_expression(text[2:-2])(**context)


def driver_context(plan: dict | None, **knobs) -> dict:
    ctx = {
        "nvidia_driver_source": "distro",
        "nvidia_driver_kernel_module": False,
        "nvidia_driver_check": True,
        **knobs,
    }
    if plan is not None:
        ctx["_nvidia_driver_plan_run"] = {"rc": 0}
        ctx["_nvidia_driver_plan"] = plan
    for name in ("_nvidia_driver_do_install", "_nvidia_driver_do_kernel"):
        if plan is not None or name != "_nvidia_driver_do_install":
            ctx[name] = value(DRIVER, name, ctx)
    return ctx


CUDA_PART = {"ok": True, "converged": True, "args": ["--json"], "message": "CUDA 11.8"}
CONVERGED = {"ok": True, "converged": True, "cuda": CUDA_PART}


def test_handed_on_when_the_driver_role_changes_nothing():
    assert value(DRIVER, "nvidia_driver_cuda_planned", driver_context(CONVERGED)) == CUDA_PART


@pytest.mark.parametrize(
    ("plan", "knobs"),
    [
        ({**CONVERGED, "converged": False}, {}),  # the driver is installed or held first
        (CONVERGED, {"nvidia_driver_kernel_module": True}),  # a module load or reboot may follow
        ({**CONVERGED, "ok": False}, {}),
        ({"ok": True, "converged": True}, {}),  # no CUDA plan asked for
    ],
)
def test_not_handed_on_when_the_driver_role_may_change_what_it_read(plan, knobs):
    assert value(DRIVER, "nvidia_driver_cuda_planned", driver_context(plan, **knobs)) == {}


def test_handed_on_from_a_converged_node_on_nvidias_repository():
    """NVIDIA's repository is added in plan.yml before a plan that resolves against it; a
    converged cuda-repo node (the repository among its sources) hands the CUDA plan on."""
    ctx = driver_context(CONVERGED, nvidia_driver_source="cuda-repo")
    assert value(DRIVER, "nvidia_driver_cuda_planned", ctx) == CUDA_PART


def test_not_handed_on_from_a_skipped_plan():
    ctx = driver_context(None)
    ctx["_nvidia_driver_plan_run"] = {"skipped": True, "changed": False}
    ctx["_nvidia_driver_do_install"] = True  # would not be templated: the plan is not read
    assert value(DRIVER, "nvidia_driver_cuda_planned", ctx) == {}


def cuda_context(planned: dict, **knobs) -> dict:
    ctx = {**CUDA_DEFAULTS, "cuda_toolkit_planned": planned, **knobs}
    ctx["_cuda_toolkit_plan_args"] = value(CUDA, "_cuda_toolkit_plan_args", ctx)
    return ctx


def test_cuda_toolkit_takes_its_own_plan_only():
    args = cuda_context({})["_cuda_toolkit_plan_args"]
    assert args[:3] == ["--json", "--gate=strict", "--state"] and "--cuda=11.8" in args
    own = {"ok": True, "converged": True, "args": args}
    assert value(CUDA, "_cuda_toolkit_take_planned", cuda_context(own)) is True
    # made for other arguments (another CUDA release, package set, policy): planned again
    for knobs in ({"cuda_toolkit_versions": ["12.4"]}, {"cuda_toolkit_package_set": "runtime"},
                  {"cuda_toolkit_compat_policy": "minor"}):  # fmt: skip
        assert value(CUDA, "_cuda_toolkit_take_planned", cuda_context(own, **knobs)) is False
    # a failed one is made again by the role, for its own message; none handed on
    assert value(CUDA, "_cuda_toolkit_take_planned", cuda_context({**own, "ok": False})) is False
    assert value(CUDA, "_cuda_toolkit_take_planned", cuda_context({})) is False


# ------------------------------------------- plan.yml: NVIDIA's repository before the resolve

_spec = importlib.util.spec_from_file_location(
    "gpunode_result_filter", ROLES.parent / "plugins/filter/gpunode_result.py"
)
_filter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_filter)
ENV.filters["gpunode.gpunode.gpunode_result"] = _filter.gpunode_result
ENV.tests["defined"] = lambda v: not isinstance(v, jinja2.Undefined)


def run(result: dict) -> dict:
    return {"rc": 0 if result.get("ok") else 1, "stdout": json.dumps(result), "stderr": ""}


FRESH = {"ok": True, "converged": False, "message": "not yet",
         "repository": {"url": "http://m/", "configured": False}}  # fmt: skip
AT_REPO = {"ok": True, "converged": True, "message": "converged",
           "repository": {"url": "http://m/", "configured": True}}  # fmt: skip


def order_context(first: dict, again: dict | None, source: str = "cuda-repo") -> dict:
    ctx = {"nvidia_driver_source": source, "_nvidia_driver_plan_run": run(first)}
    if again is not None:
        ctx["_nvidia_driver_plan_again"] = again
    ctx["_nvidia_driver_plan_first"] = value(DRIVER, "_nvidia_driver_plan_first", ctx)
    return ctx


def test_plan_yml_adds_the_repository_before_the_plan_that_resolves_against_it():
    tasks = yaml.safe_load((ROLES / "nvidia_driver/tasks/plan.yml").read_text())
    names = [t["name"] for t in tasks]
    first, block, check = tasks[0], tasks[1], tasks[2]
    assert first["register"] == "_nvidia_driver_plan_run" and names[2] == "Check the plan"
    assert block["when"] == "_nvidia_driver_repository_missing"
    inner = block["block"]
    assert inner[0]["ansible.builtin.include_tasks"]["file"] == "repository.yml"
    assert inner[0]["vars"]["nvidia_driver_repository"] == (
        "{{ _nvidia_driver_plan_first.repository }}")  # fmt: skip
    assert inner[1]["register"] == "_nvidia_driver_plan_again"
    assert inner[1]["gpunode.gpunode.direct_command"] == first["gpunode.gpunode.direct_command"]
    assert "--resolve" in DRIVER["_nvidia_driver_plan_args"]
    assert "_nvidia_driver_plan" in str(check)
    change = yaml.safe_load((ROLES / "nvidia_driver/tasks/change.yml").read_text())
    assert "repository.yml" not in str(change)  # no second place adds it


def test_a_fresh_node_adds_the_repository_and_uses_the_second_plan():
    ctx = order_context(FRESH, None)
    assert value(DRIVER, "_nvidia_driver_repository_missing", ctx) is True
    ctx = order_context(FRESH, run(AT_REPO))
    assert value(DRIVER, "_nvidia_driver_plan", ctx)["message"] == "converged"


@pytest.mark.parametrize(
    ("first", "source"),
    [
        (AT_REPO, "cuda-repo"),  # converged: the repository is among its sources: one run
        ({"ok": True, "converged": True, "message": "distro",
          "repository": {"name": "debian"}}, "distro"),
        ({**FRESH, "ok": False, "message": "bad value"}, "cuda-repo"),  # the assert says why
    ],
)  # fmt: skip
def test_one_plan_run_where_the_repository_is_there_or_not_needed(first, source):
    ctx = order_context(first, {"skipped": True, "changed": False}, source)
    assert value(DRIVER, "_nvidia_driver_repository_missing", ctx) is False
    assert value(DRIVER, "_nvidia_driver_plan", ctx)["message"] == first["message"]


# ------------------------------- the fabric manager's service without the kernel module


@pytest.mark.parametrize(
    ("km", "todo", "want"),
    [
        (False, {"services": ["nvidia-fabricmanager"]}, True),
        (False, {"services": []}, False),  # enabled and active: one command
        (True, {"services": []}, False),  # kernel.yml starts the services there
        (False, {}, False),  # an older plan without services
    ],
)
def test_fm_service_phase_runs_only_where_the_plan_says(km, todo, want):
    ctx = {"nvidia_driver_kernel_module": km, "_nvidia_driver_plan": {"todo": todo}}
    assert value(DRIVER, "_nvidia_driver_do_services", ctx) is want


def test_services_yml_starts_or_restarts_what_todo_names():
    task, wait = yaml.safe_load((ROLES / "nvidia_driver/tasks/services.yml").read_text())
    assert wait == {"name": "Wait for the NVSwitch fabric once the fabric manager runs",
                    "ansible.builtin.import_tasks": "fabric_wait.yml"}  # fmt: skip
    assert task["loop"] == "{{ _nvidia_driver_plan.todo.services }}"
    spec = task["ansible.builtin.systemd_service"]
    assert spec["enabled"] is True
    state = ENV.compile_expression(spec["state"].strip()[2:-2])
    plan = {"todo": {"restart": ["nvidia-fabricmanager"]}}
    assert state(item="nvidia-fabricmanager", _nvidia_driver_plan=plan) == "restarted"
    assert state(item="nvidia-fabricmanager", _nvidia_driver_plan={"todo": {"restart": []}}) == (
        "started")  # fmt: skip
    main = (ROLES / "nvidia_driver/tasks/main.yml").read_text()
    assert "_nvidia_driver_do_services" in main


# ------------------------------- the bounded wait for the NVSwitch fabric (fabric_wait.yml)

FABRIC_WAIT = yaml.safe_load((ROLES / "nvidia_driver/tasks/fabric_wait.yml").read_text())


@pytest.mark.parametrize(
    ("plan", "check_mode", "want"),
    [
        ({"fabric_manager": "nvidia-fabricmanager-535"}, False, True),
        ({"fabric_manager": "nvidia-fabricmanager-535"}, True, False),  # nothing was started
        ({"fabric_manager": ""}, False, False),  # no NVSwitch: no fabric manager
        ({"fabric_manager": None}, False, False),
        ({}, False, False),  # a failed plan's result
    ],
)
def test_the_fabric_wait_runs_only_where_the_plan_has_a_fabric_manager(plan, check_mode, want):
    ctx = {"_nvidia_driver_plan": plan, "ansible_check_mode": check_mode}
    assert value(DRIVER, "_nvidia_driver_do_fabric_wait", ctx) is want


def test_the_fabric_wait_runs_gpunode_with_the_timeout_and_fails_with_its_line():
    from gpunode.cli.main import build_parser

    wait, check = FABRIC_WAIT
    assert wait["name"] == "Wait for the NVSwitch fabric (bounded)"
    assert wait["when"] == "_nvidia_driver_do_fabric_wait"
    assert (wait["check_mode"], wait["changed_when"], wait["failed_when"]) == (False, False, False)
    argv = ENV.compile_expression(wait["gpunode.gpunode.direct_command"]["argv"].strip()[2:-2])
    cli = ["/usr/local/bin/gpunode"]
    got = argv(nvidia_driver_cli=cli, nvidia_driver_fabric_wait_timeout=300)
    assert got == [*cli, "provision", "fabric-wait", "--json", "--timeout=300"]
    args = build_parser("provision").parse_args(got[1:])  # gpunode's own parser takes them
    assert (args.timeout, args.interval, args.json) == (300.0, 1.0, True)
    # the check: gpunode's JSON, or its one error line when it printed none
    assert check["when"] == "_nvidia_driver_fabric_wait.rc is defined"
    assert check["ansible.builtin.assert"]["that"] == "_nvidia_driver_fabric_wait_result.ok"
    line = "the NVSwitch fabric was not trained within 300 s (nvidia_driver_fabric_wait_timeout): x"
    for run in ({"rc": 1, "stdout": json.dumps({"ok": False, "message": line}), "stderr": ""},
                {"rc": 2, "stdout": "", "stderr": line}):  # fmt: skip
        result = value(
            DRIVER, "_nvidia_driver_fabric_wait_result", {"_nvidia_driver_fabric_wait": run}
        )
        assert result["ok"] is False and result["message"] == line


def test_kernel_yml_waits_after_starting_the_services_when_it_started_them():
    (block,) = [t for t in yaml.safe_load((ROLES / "nvidia_driver/tasks/kernel.yml").read_text())
                if "block" in t]  # fmt: skip
    names = [t["name"] for t in block["block"]]
    start = names.index("Start the driver's services (the loaded module is the installed one)")
    assert names[start + 1] == "Wait for the NVSwitch fabric once the fabric manager runs"
    started, wait = block["block"][start : start + 2]
    assert wait["ansible.builtin.import_tasks"] == "fabric_wait.yml"
    assert wait["when"] == started["when"]
