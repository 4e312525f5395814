"""A provisioning run on nodes provisioned before with the same inputs must change nothing.

`gpunode sim playbook -i INVENTORY PLAYBOOK [ansible-playbook arguments]` runs
ansible-playbook on a simulated cluster (./scripts/demo runs site.yml with it) and holds it
to the README's promise "run it again: zero changed (provisioning)":

* What a run changed comes from ansible itself: the callback plugin ``gpunode_changes``
  (``callback/``, enabled for this run only) records, per play, every host a task ran on and
  the tasks that reported ``changed`` there, and writes that as JSON when the run ends.
  Not a parse of the text output: the PLAY RECAP counts every play (validation too), names
  no task, and its format is the stdout callback's to change.
* The provisioning plays are those of playbooks/provision.yml (site.yml imports it), told by
  the file each play comes from.
* Which nodes were provisioned before: after a successful run (not check mode), every node
  the provisioning play ran on gets MARKER, holding the fingerprint of the run's inputs: the
  project files provisioning reads (INPUTS: playbooks, roles, gpunode's source, which is the
  wheel the nodes get), the inventory with its group_vars/host_vars, and the -e/--tags/
  --skip-tags given. The marker lives inside the node, so a recreated node (`gpunode sim
  down`, `up`) counts as fresh; the fingerprint, so a run with other inputs (an edited role,
  another pin) may change things without failing.
* The verdict: a node whose marker matches this run's fingerprint and on which a
  provisioning task changed something (in --check: would change) fails the command, exit 1,
  with one line naming each such host and task. A failed ansible-playbook run is judged by
  nothing but its own exit status, which this command passes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from . import cluster
from .docker import exec_

MARKER = "/var/lib/gpunode-sim/provisioned"
LOG_ENV = "GPUNODE_CHANGES_LOG"
CALLBACK = "gpunode_changes"
CALLBACK_DIR = Path(__file__).resolve().parent / "callback"
SCHEMA = "gpunode.sim.changes/v1"
PROVISION_PLAYBOOK = "playbooks/provision.yml"  # relative to the project
# What a provisioning run reads from the project (relative paths; directories whole).
# README.md: the wheel's metadata carries it, so it changes the wheel the nodes get.
INPUTS = (
    "site.yml",
    "ansible.cfg",
    "playbooks",
    "roles",
    "src/gpunode",
    "pyproject.toml",
    "README.md",
    "requirements-dev.txt",
    "requirements.yml",
)


class RerunError(RuntimeError):
    """The run's record cannot be used (one line)."""


# --- the record (written by the callback, read here) ---------------------------------


class Recorder:
    """What the callback collects during one ansible-playbook run."""

    def __init__(self, check: bool, options: dict) -> None:
        self.doc: dict = {"schema": SCHEMA, "check": check, "options": options, "plays": []}

    def play(self, file: str) -> None:
        self.doc["plays"].append({"file": file, "hosts": {}})

    def result(self, host: str, task: str, changed: bool) -> None:
        if not self.doc["plays"]:  # a result outside a play cannot happen; keep it anyway
            self.play("")
        tasks = self.doc["plays"][-1]["hosts"].setdefault(host, [])
        if changed and task not in tasks:
            tasks.append(task)

    def dump(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.doc, fh)
        os.replace(tmp, path)


def options_from_cli(cliargs) -> dict:
    """The ansible-playbook options that change what a run applies (CLIARGS, as parsed by
    ansible): extra vars, tags, skipped tags. Not --check, --diff, --limit, verbosity."""
    return {
        "extra_vars": [str(v) for v in cliargs.get("extra_vars") or ()],
        "tags": sorted(str(v) for v in cliargs.get("tags") or ()),
        "skip_tags": sorted(str(v) for v in cliargs.get("skip_tags") or ()),
    }


def read_log(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RerunError(
            f"the change recorder (callback {CALLBACK}) wrote nothing; was it loaded? "
            f"(ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED)"
        ) from None
    except (OSError, ValueError) as exc:
        raise RerunError(f"the change record {path} cannot be read: {exc}") from None
    ok = (
        isinstance(doc, dict)
        and doc.get("schema") == SCHEMA
        and isinstance(doc.get("check"), bool)
        and isinstance(doc.get("options"), dict)
        and isinstance(doc.get("plays"), list)
        and all(
            isinstance(p, dict)
            and isinstance(p.get("file"), str)
            and isinstance(p.get("hosts"), dict)
            and all(isinstance(t, list) for t in p["hosts"].values())
            for p in doc["plays"]
        )
    )
    if not ok:
        raise RerunError(f"the change record {path} is not a {SCHEMA} document")
    return doc


# --- inputs, verdict --------------------------------------------------------------------


def _files(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(".pyc"):
                yield Path(dirpath) / name


def inputs_digest(project: Path, inventory: Path) -> str:
    """The files a provisioning run reads: INPUTS of the project, the inventory file and
    its group_vars/host_vars (named relative to their roots, so only content counts)."""
    h = hashlib.sha256()
    roots = [(project, project / p) for p in INPUTS]
    roots += [(inventory.parent, inventory)]
    roots += [(inventory.parent, inventory.parent / d) for d in ("group_vars", "host_vars")]
    for base, root in roots:
        if not root.exists():
            continue
        for f in _files(root):
            h.update(f"{f.relative_to(base)}\0".encode())
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def fingerprint(files_digest: str, options: dict, cwd: Path) -> str:
    """The run's inputs: the files' digest and the options (an `-e @FILE` by content)."""
    extra = []
    for value in options.get("extra_vars", []):
        if value.startswith("@"):
            # ansible read it (the run succeeded); a file gone since is only a name
            with contextlib.suppress(OSError):
                value = "@" + hashlib.sha256((cwd / value[1:]).read_bytes()).hexdigest()
        extra.append(value)
    doc = {"files": files_digest, **options, "extra_vars": extra}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def judge(doc: dict, provisioned: set[str], provision_file: Path) -> tuple[list[str], set[str]]:
    """(one "HOST: TASK" per change on a node provisioned before, the hosts the
    provisioning plays ran on)."""
    problems: list[str] = []
    ran: set[str] = set()
    for play in doc["plays"]:
        if not play["file"] or Path(play["file"]).resolve() != provision_file.resolve():
            continue
        for host, tasks in play["hosts"].items():
            ran.add(host)
            if host in provisioned:
                problems += [f"{host}: {task}" for task in tasks]
    return problems, ran


def verdict(
    problems: list[str], check: bool, gated: list[str], fresh: list[str]
) -> tuple[bool, str]:
    """(passed, the one line saying so)."""
    if problems:
        verb = "would change" if check else "changed"
        return False, (
            f"not idempotent: provisioning {verb} {len(problems)} task(s) on nodes provisioned "
            f"before with the same inputs: {'; '.join(problems)}"
        )
    parts = []
    if gated:
        parts.append(
            f"provisioning {'would change' if check else 'changed'} nothing on "
            f"{', '.join(gated)} (provisioned before with the same inputs)"
        )
    if fresh:
        parts.append(
            f"{'checked' if check else 'provisioned'} {', '.join(fresh)} for the first time "
            f"with these inputs{'' if check else '; a second run must change nothing there'}"
        )
    return True, "; ".join(parts) or "no simulated node ran the provisioning play"


# --- markers in the nodes -----------------------------------------------------------------


def read_markers(names: Iterable[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        proc = exec_(name, ["cat", MARKER], check=False, timeout=60)
        out[name] = proc.stdout.decode().strip() if proc.returncode == 0 else None
    return out


def write_markers(names: Iterable[str], value: str) -> None:
    script = f"mkdir -p {Path(MARKER).parent} && cat > {MARKER}"
    for name in names:
        exec_(name, ["sh", "-c", script], input=f"{value}\n".encode(), timeout=60)


# --- the command --------------------------------------------------------------------------


def ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    found = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if not found:
        raise cluster.SimError(
            f"ansible-playbook is neither beside {sys.executable} nor on PATH; run scripts/setup"
        )
    return found


def recorder_env(log: Path) -> dict[str, str]:
    """The environment that enables the change recorder for one run (keeping callbacks and
    plugin directories the caller's environment already names)."""
    env = dict(os.environ)
    paths = [str(CALLBACK_DIR), *filter(None, [env.get("ANSIBLE_CALLBACK_PLUGINS")])]
    enabled = [*filter(None, [env.get("ANSIBLE_CALLBACKS_ENABLED")]), CALLBACK]
    env.update(
        {
            "ANSIBLE_CALLBACK_PLUGINS": ":".join(paths),
            "ANSIBLE_CALLBACKS_ENABLED": ",".join(enabled),
            LOG_ENV: str(log),
        }
    )
    return env


def run_playbook(
    inventory: Path,
    args: list[str],
    project: Path,
    *,
    playbook_cmd: str | None = None,
    markers_read: Callable[[Iterable[str]], dict[str, str | None]] = read_markers,
    markers_write: Callable[[Iterable[str], str], None] = write_markers,
    out: Callable[[str], None] = print,
) -> int:
    """Run ansible-playbook ARGS on the inventory's simulated nodes and judge it (module
    docstring). Returns ansible-playbook's exit status when it failed, else 0 or 1."""
    nodes = [n.name for n in cluster.read_inventory(inventory)]
    before = markers_read(nodes)  # the state before this run; only a judged run writes them
    files = inputs_digest(project, inventory)
    cmd = playbook_cmd or ansible_playbook()
    with tempfile.TemporaryDirectory(prefix="gpunode-changes-") as tmp:
        log = Path(tmp) / "changes.json"
        proc = subprocess.run(
            [cmd, "-i", str(inventory), *args], env=recorder_env(log), check=False
        )
        if proc.returncode != 0:
            return proc.returncode
        doc = read_log(log)
    fp = fingerprint(files, doc["options"], Path.cwd())
    provisioned = {n for n, m in before.items() if m == fp}
    problems, ran = judge(doc, provisioned, project / PROVISION_PLAYBOOK)
    ran_nodes = [n for n in nodes if n in ran]
    gated = [n for n in ran_nodes if n in provisioned]
    fresh = [n for n in ran_nodes if n not in provisioned]
    passed, line = verdict(problems, doc["check"], gated, fresh)
    if not doc["check"]:  # the run provisioned them, whatever the verdict on the others
        markers_write(fresh, fp)
    out(line)
    return 0 if passed else 1
