"""Every role's defaults/main.yml and meta/argument_specs.yml describe the same variables.

For each role under roles/: every key of defaults/main.yml is an option of an entry point
of meta/argument_specs.yml, every option has a default there unless it is
``required: true``, and a ``default:`` the spec documents is the value defaults/main.yml
sets. A role with defaults needs argument specs. Failures name the role and the key.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"


def _yaml(path: Path) -> dict:
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    return data or {}


def problems(role: Path) -> list[str]:
    defaults = _yaml(role / "defaults" / "main.yml")
    specs = _yaml(role / "meta" / "argument_specs.yml").get("argument_specs") or {}
    if not specs:
        return (
            [f"{role.name}: defaults/main.yml without meta/argument_specs.yml"] if defaults else []
        )
    # defaults/main.yml serves every entry point (main, and e.g. container_engine's
    # restart): its keys are the options of all of them together.
    options = {}
    for entry in specs.values():
        options.update((entry or {}).get("options") or {})
    out = []
    for key in defaults:
        if key not in options:
            out.append(f"{role.name}: default {key} is not an option in meta/argument_specs.yml")
    for key, spec in options.items():
        spec = spec or {}
        if key not in defaults:
            if not spec.get("required"):
                out.append(f"{role.name}: option {key} has no default in defaults/main.yml")
        elif spec.get("required"):
            out.append(f"{role.name}: option {key} is required but has a default")
        elif "default" in spec and spec["default"] != defaults[key]:
            out.append(
                f"{role.name}: option {key} documents default {spec['default']!r}, "
                f"defaults/main.yml sets {defaults[key]!r}"
            )
    return out


def test_there_are_roles_to_check():
    assert sorted(p.name for p in ROLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir() if p.is_dir()))
def test_defaults_match_argument_specs(role):
    assert problems(ROLES / role) == []


def test_a_stray_or_missing_default_is_named(tmp_path):
    role = tmp_path / "demo"
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text("demo_a: 1\ndemo_stray: x\n")
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n"
        "      demo_a: {type: int, default: 2}\n"
        "      demo_b: {type: str}\n"
        "      demo_c: {type: str, required: true}\n"
    )
    assert problems(role) == [
        "demo: default demo_stray is not an option in meta/argument_specs.yml",
        "demo: option demo_a documents default 2, defaults/main.yml sets 1",
        "demo: option demo_b has no default in defaults/main.yml",
    ]
    (role / "meta" / "argument_specs.yml").unlink()
    assert problems(role) == ["demo: defaults/main.yml without meta/argument_specs.yml"]


def cli_options() -> dict[str, dict]:
    """Every role's `*_cli` option (how the role runs gpunode), by role:name."""
    out = {}
    for role in sorted(p for p in ROLES.iterdir() if p.is_dir()):
        specs = _yaml(role / "meta" / "argument_specs.yml").get("argument_specs") or {}
        for entry in specs.values():
            for key, spec in ((entry or {}).get("options") or {}).items():
                if key.endswith("_cli"):
                    out[f"{role.name}:{key}"] = spec or {}
    return out


def test_every_cli_option_is_an_argv_list():
    """One type for all of them: an argv list, since gpu_preflight's launcher (python3 -c
    SCRIPT WHEEL_DIR), which nvidia_driver and cuda_toolkit run by default, is not one path."""
    options = cli_options()
    assert len(options) >= 5, options
    wrong = {k: (s.get("type"), s.get("elements")) for k, s in options.items()
             if (s.get("type"), s.get("elements")) != ("list", "str")}  # fmt: skip
    assert wrong == {}
    for name in options:
        role, key = name.split(":")
        default = _yaml(ROLES / role / "defaults" / "main.yml")[key]
        assert isinstance(default, list) or str(default).startswith("{{"), (name, default)


def _walk(node, out: set[str]) -> None:
    """Names a task file or vars file gives itself: registered results, set_fact keys,
    tags (also a vars list named *_tags), vars keys."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "register" and isinstance(value, str):
                out.add(value)
            elif key in ("ansible.builtin.set_fact", "set_fact") and isinstance(value, dict):
                out.update(value)
            elif (key == "tags" or str(key).endswith("_tags")) and isinstance(value, list):
                out.update(v for v in value if isinstance(v, str))
            elif key == "vars" and isinstance(value, dict):
                out.update(value)
            _walk(value, out)
    elif isinstance(node, list):
        for item in node:
            _walk(item, out)


def undeclared() -> dict[str, list[str]]:
    """Public variables named after a role (ROLE_*) that the suite uses but no role declares
    (an argument-spec option, a vars key, a register, a set_fact, a tag), with where."""
    root = ROLES.parent
    names = sorted((p.name for p in ROLES.iterdir() if p.is_dir()), key=len, reverse=True)
    used = re.compile(r"(?<![\w.])(?:" + "|".join(names) + r")_\w+")
    declared: set[str] = set()
    files = [p for p in [*ROLES.rglob("*"), *(root / "playbooks").rglob("*"), root / "site.yml"]
             if p.suffix in (".yml", ".j2") and "files" not in p.relative_to(root).parts]  # fmt: skip
    for path in files:
        if path.suffix == ".yml":
            data = yaml.safe_load(path.read_text())
            if path.parent.name in ("vars", "defaults") and isinstance(data, dict):
                declared.update(data)
            _walk(data, declared)
    for role in ROLES.iterdir():
        specs = _yaml(role / "meta" / "argument_specs.yml").get("argument_specs") or {}
        for entry in specs.values():
            declared.update((entry or {}).get("options") or {})
    out: dict[str, list[str]] = {}
    for path in files:
        for m in used.finditer(path.read_text()):
            if m[0] not in declared:
                out.setdefault(m[0], []).append(str(path.relative_to(root)))
    return out


def test_every_role_variable_the_suite_uses_is_declared():
    assert undeclared() == {}


def test_the_installed_collection_documents_every_role(collections_path, tmp_path):
    """The argument specs are the collection's documented interface (issue 36): from any
    directory, `ansible-doc -t role gpunode.gpunode.<role>` shows every role of roles/ with
    each entry point and exactly the options its meta/argument_specs.yml declares."""
    import json
    import os
    import subprocess
    import sys

    roles = sorted(p.name for p in ROLES.iterdir() if p.is_dir())
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "role", "--json",
         *[f"gpunode.gpunode.{r}" for r in roles]],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
             "ANSIBLE_CONFIG": str(tmp_path / "none.cfg")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert sorted(docs) == [f"gpunode.gpunode.{r}" for r in roles]
    for role in roles:
        specs = _yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]
        shown = docs[f"gpunode.gpunode.{role}"]["entry_points"]
        assert sorted(shown) == sorted(specs), role
        for entry, spec in specs.items():
            want = sorted((spec or {}).get("options") or {})
            assert sorted(shown[entry].get("options") or {}) == want, (role, entry)
            assert shown[entry].get("short_description"), (role, entry)
