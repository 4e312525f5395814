"""What the node should be: expectations from flags, or from a vars file holding the same
inventory variables the provisioning roles read.

Missing expectations are not an error: what needs no expectation is validated, and each
check that needs a missing one is ``skip`` with a detail naming the flag and the variable
that would give it (so an inventory without expectations still gets a useful run and a
clear list of what was not checked). A value that is present but wrong is bad input: one
line naming it and what is accepted, exit 2, nothing run.

Vars file (YAML or JSON, e.g. ``ansible -m debug -a var=hostvars[inventory_hostname]``
output or a host_vars file; ``--vars -`` reads it from standard input, as
playbooks/validate.yml hands it over); keys other than these are ignored, as an inventory
has many:

  gpunode_expected_gpus               --expect-gpus N
  nvidia_driver_version               --driver-pin V   (exact; wins over the branch)
  nvidia_driver_branch                --driver-pin B
  cuda_toolkit_versions               --cuda V (repeatable)
  cuda_toolkit_compat_policy          --policy strict|minor|forward
  container_engine_runtime_default    --runtime-default
  gpu_container_runtime_docker_default  (same)
  container_engine_runtime_name       --runtime-name (default gpunode)
  gpunode_validate_engine             --engine docker|podman|cri|none
  gpu_mig_config                      --expect-mig-name NAME (the selected mig-parted config)
  gpu_mig_configs                     the layouts: mig-parted's mig-configs (or the whole v1
                                      document), as the gpu_mig role takes them
  gpu_mig_config_path                 --expect-mig-config FILE: the mig-parted file on the node
                                      (default /etc/gpunode/mig-config.yaml, where the
                                      gpu_mig role writes the layouts)

A config name with no layouts given reads that file; layouts without a name are bad input,
as is a config the layouts do not have (the file is parsed as `gpunode mig` parses it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..mig import MigConfigError
from ..mig.config import document
from ..provision import ProvisionError
from ..provision.cuda import check_policy
from ..provision.versions import check_cuda, check_pin
from ..util.boundedyaml import describe
from .mig import Layout, load_layout, parse_layout

ENGINES = ("docker", "podman", "cri", "none")
STDIN = "-"  # --vars -: the variables on standard input (the playbook hands them over so)
MIG_CONFIG_PATH = "/etc/gpunode/mig-config.yaml"  # where the gpu_mig role writes the layouts


class BadInput(ValueError):
    """An expectation or path the operator must fix: one line, exit 2."""


# A vars file's values are shown with describe and converted with _scalar, never with
# repr()/str(): boundedyaml counts an alias once per use, but a YAML alias nine times per
# level is 9**n items as text (495 bytes: a 2 GB message).
def _scalar(where: str, value: Any, accepted: str) -> str:
    """A string, number or boolean value as text; anything else (a list, a mapping) is
    BadInput naming ``where``, the value's start and size, and ``accepted``."""
    if isinstance(value, str | int | float):
        return value if isinstance(value, str) else str(value)
    raise BadInput(f"{where}: {describe(value)} is not {accepted}")


@dataclass
class Expectations:
    gpus: int | None = None
    driver_pin: str | None = None
    driver_package: str | None = None
    cuda: list[str] = field(default_factory=list)
    policy: str = "strict"
    runtime_default: bool = False
    runtime_name: str = "gpunode"
    engine: str = "docker"
    mig_layout: Layout | None = None
    sources: dict[str, str] = field(default_factory=dict)  # expectation -> where it came from

    def missing(self) -> list[str]:
        """The expectations nobody gave (their checks are skipped)."""
        out = []
        if self.gpus is None:
            out.append("expected GPU count (--expect-gpus, gpunode_expected_gpus)")
        if self.driver_pin is None:
            out.append("driver pin (--driver-pin, nvidia_driver_version/nvidia_driver_branch)")
        if self.mig_layout is None:
            out.append("MIG layout (--expect-mig-config FILE --expect-mig-name NAME, "
                       "gpu_mig_config with gpu_mig_configs or gpu_mig_config_path)")  # fmt: skip
        return out


def _gpus(where: str, value: Any) -> int:
    bad = BadInput(f"{where}: {describe(value)} is not a GPU count; expected an integer >= 0")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad
    try:
        n = int(value)
    except ValueError:
        raise bad from None
    if n < 0:
        raise bad
    return n


def _bool(where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise BadInput(f"{where}: {describe(value)} is not a boolean; expected true or false")


def _provision(fn, *args: Any) -> Any:
    try:
        return fn(*args)
    except ProvisionError as exc:
        raise BadInput(str(exc)) from None


def _read_text(path: str) -> str:
    """The vars file's text; ``-`` is standard input (it must not be a terminal: a run
    would wait there for input nobody gives)."""
    if path != STDIN:
        return Path(path).read_text(encoding="utf-8")
    if sys.stdin is None or sys.stdin.isatty():
        raise BadInput("--vars -: standard input is a terminal; pipe the variables in "
                       "(YAML or JSON), or name a file")  # fmt: skip
    return sys.stdin.buffer.read().decode("utf-8")


def read_vars(path: str) -> dict[str, Any]:
    """The vars file (``-``: standard input) as a mapping; one-line BadInput for anything
    else."""
    from ..util import boundedyaml

    try:
        text = _read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise BadInput(f"--vars {path}: cannot read ({why})") from None
    try:
        # YAML within gpunode.util.boundedyaml's bounds (a vars file may come from a shared
        # repository or a ConfigMap: an alias bomb or 5,000 '[' is one line, not a traceback)
        data = boundedyaml.loads(text) if not text.lstrip().startswith("{") else json.loads(text)
    except (boundedyaml.YamlError, json.JSONDecodeError) as exc:
        first = " ".join(str(exc).split())[:160]
        raise BadInput(f"--vars {path}: not valid YAML/JSON ({first})") from None
    except RecursionError:
        raise BadInput(f"--vars {path}: not valid YAML/JSON (nested too deeply)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"--vars {path}: expected a mapping of variables, got {type(data).__name__}")
    return data


def build(
    *,
    vars_file: str | None = None,
    expect_gpus: str | None = None,
    driver_pin: str | None = None,
    driver_package: str | None = None,
    cuda: list[str] | None = None,
    policy: str | None = None,
    runtime_default: bool | None = None,
    runtime_name: str | None = None,
    engine: str | None = None,
    mig_config_file: str | None = None,
    mig_config_name: str | None = None,
) -> Expectations:
    """Flags win over the vars file; every value is checked here, before anything runs."""
    v = read_vars(vars_file) if vars_file else {}
    e = Expectations()

    def pick(flag: Any, *keys: str) -> tuple[Any, str] | None:
        if flag is not None and flag != []:
            return flag, "flag"
        for k in keys:
            if v.get(k) not in (None, "", []):
                return v[k], k
        return None

    if got := pick(expect_gpus, "gpunode_expected_gpus"):
        e.gpus, e.sources["gpus"] = (
            _gpus(got[1] if got[1] != "flag" else "--expect-gpus", got[0]),
            got[1],
        )
    if got := pick(driver_pin, "nvidia_driver_version", "nvidia_driver_branch"):
        where = "--driver-pin" if got[1] == "flag" else got[1]
        pin = _scalar(where, got[0], "a driver version (e.g. 535.261.03) or branch (e.g. 535)")
        e.driver_pin = _provision(check_pin, where, pin)
        e.sources["driver_pin"] = got[1]
    if driver_package:
        e.driver_package = driver_package
    if got := pick(cuda, "cuda_toolkit_versions"):
        where = "--cuda" if got[1] == "flag" else got[1]
        values = got[0] if isinstance(got[0], list) else [got[0]]
        texts = [_scalar(where, item, "a CUDA version (e.g. 12.4) or a list of them")
                 for item in values]  # fmt: skip
        flat = [x.strip() for text in texts for x in text.split(",") if x.strip()]
        e.cuda = [_provision(check_cuda, where, x) for x in flat]
        e.sources["cuda"] = got[1]
    if got := pick(policy, "cuda_toolkit_compat_policy"):
        where = "--policy" if got[1] == "flag" else got[1]
        policy = _scalar(where, got[0], "one of strict, minor, forward")
        e.policy = _provision(check_policy, policy)
    if runtime_default:
        e.runtime_default = True
    else:
        # the role's own name wins, as in roles/gpu_container_runtime (its default is the
        # engine role's name): `container_engine_runtime_default: true` with
        # `gpu_container_runtime_docker_default: false` leaves Docker's default alone
        for k in ("gpu_container_runtime_docker_default", "container_engine_runtime_default"):
            if k in v:
                e.runtime_default = _bool(k, v[k])
                break
    if got := pick(runtime_name, "container_engine_runtime_name"):
        where = "--runtime-name" if got[1] == "flag" else got[1]
        accepted = "a runtime name (letters, digits, - _ .)"
        name = _scalar(where, got[0], accepted)
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            raise BadInput(f"{where}: {describe(name)} is not {accepted}")
        e.runtime_name = name
    if got := pick(engine, "gpunode_validate_engine"):
        if got[0] not in ENGINES:
            where = "--engine" if got[1] == "flag" else got[1]
            raise BadInput(f"{where}: {describe(got[0])} is not one of {', '.join(ENGINES)}")
        e.engine = got[0]
    e.mig_layout = _mig_layout(v, mig_config_file, mig_config_name)
    if e.mig_layout is not None:
        e.sources["mig_layout"] = e.mig_layout.source
    return e


def _mig_layout(v: dict[str, Any], path: str | None, name: str | None) -> Layout | None:
    """The expected MIG layout: flags, else gpu_mig_config with gpu_mig_configs (the
    layouts) or the file gpu_mig_config_path (default: the gpu_mig role's); no name and no
    layouts: None (mig.layout skips)."""
    name_where = "--expect-mig-name" if name else "gpu_mig_config"
    name = name or v.get("gpu_mig_config") or None
    doc = None if path else v.get("gpu_mig_configs") or None
    if name is None:
        if path or doc is not None:
            given = "--expect-mig-config" if path else "gpu_mig_configs"
            raise BadInput(f"{given} is given without the config to expect; name it with "
                           "--expect-mig-name NAME (or gpu_mig_config)")  # fmt: skip
        return None
    if not isinstance(name, str):
        raise BadInput(f"{name_where}: {describe(name)} is not a config name; expected a string")
    try:
        if doc is not None:
            if isinstance(doc, dict) and not {"version", "mig-configs"} & set(doc):
                doc = document(doc)  # mig-configs alone, as the role has them
            return parse_layout(doc, name, "gpu_mig_configs")
        if path is None and v.get("gpu_mig_config_path"):
            path = _scalar("gpu_mig_config_path", v["gpu_mig_config_path"], "a file's path")
        return load_layout(path or MIG_CONFIG_PATH, name)
    except MigConfigError as exc:
        raise BadInput(str(exc)) from None
