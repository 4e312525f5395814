"""The CUDA plan nvidia_driver's plan run makes for cuda_toolkit (playbooks/provision.yml):
handed on only when the driver role changes nothing that plan read, taken only when it is ok
and made with exactly cuda_toolkit's arguments. The roles' own expressions
(roles/*/vars/main.yml) are evaluated here with the values Ansible would give them."""

from __future__ import annotations

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
    for name in ("_nvidia_driver_do_repository", "_nvidia_driver_do_install",
                 "_nvidia_driver_do_kernel"):  # fmt: skip
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
        (CONVERGED, {"nvidia_driver_source": "cuda-repo"}),  # the repository may change
        ({**CONVERGED, "ok": False}, {}),
        ({"ok": True, "converged": True}, {}),  # no CUDA plan asked for
    ],
)
def test_not_handed_on_when_the_driver_role_may_change_what_it_read(plan, knobs):
    assert value(DRIVER, "nvidia_driver_cuda_planned", driver_context(plan, **knobs)) == {}


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
