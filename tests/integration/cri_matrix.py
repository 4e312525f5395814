"""The CRI matrix's data (cri_matrix.yaml): loaded, checked, expanded into cells, and README's
strategy table rendered from it.

    python -m tests.integration.cri_matrix                 # print README's table
    python -m tests.integration.cri_matrix --write-readme  # rewrite it in README.md

The table sits in README.md between the BEGIN/END markers below;
tests/unit/test_cri_matrix_readme.py checks it equals what this module renders, so the
README can only say what the matrix runs (tests/integration/test_cri_matrix.py).
Standard library and PyYAML only: the unit test imports it without a node.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

DATA = Path(__file__).with_name("cri_matrix.yaml")
README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN = "<!-- cri-matrix table: generated from tests/integration/cri_matrix.yaml -->"
END = "<!-- end of cri-matrix table -->"
OUTCOMES = ("allocated", "all", "none", "nodes", "error")
ERROR_AT = ("StartError", "CreateContainer", "RunPodSandbox")
CONDITIONS = ("containerd", "setup", "security")
POD_KEYS = {"row", "plugin", "gpunode", "gpus", "env", "image", "privileged", "mig", "expect"}
RULE_KEYS = {*CONDITIONS, "get", "note", "text", "at"}
STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
RELEASE_NAMES = {"bookworm": "Debian 12", "trixie": "Debian 13", "forky": "Debian 14"}


class MatrixError(ValueError):
    """A bad entry in cri_matrix.yaml, in one line naming it and what is accepted."""


@dataclass(frozen=True)
class Cell:
    pod: str
    release: str
    setup: str
    security: str

    @property
    def id(self) -> str:
        return f"{self.release}-{self.setup}-{self.security}-{self.pod}"


class Matrix:
    def __init__(self, data: dict):
        self.containerd: dict[str, str] = data["containerd"]
        self.setups: dict[str, str] = data["setups"]
        self.security: dict[str, dict] = data["security"]
        self.pods: dict[str, dict] = data["pods"]
        self._check()

    @property
    def releases(self) -> tuple[str, ...]:
        return tuple(self.containerd)

    def _check(self) -> None:
        values = {
            "containerd": set(self.containerd.values()),
            "setup": set(self.setups),
            "security": set(self.security),
        }
        for name, pod in self.pods.items():
            extra = set(pod) - POD_KEYS
            if extra:
                raise MatrixError(
                    f"pods.{name}: unknown key {sorted(extra)[0]!r}; accepted: {sorted(POD_KEYS)}"
                )
            plugin = pod.get("plugin")
            if plugin and plugin.get("strategy") not in STRATEGIES:
                raise MatrixError(
                    f"pods.{name}.plugin.strategy: {plugin.get('strategy')!r}; accepted: "
                    f"{', '.join(STRATEGIES)}"
                )
            if pod.get("mig") not in (None, "mixed", "single"):
                raise MatrixError(f"pods.{name}.mig: {pod['mig']!r}; accepted: mixed, single")
            rules = pod.get("expect") or []
            if not rules or any(set(r) & set(CONDITIONS) for r in rules[-1:]):
                raise MatrixError(f"pods.{name}.expect: the last rule must have no condition")
            for i, rule in enumerate(rules):
                where = f"pods.{name}.expect[{i}]"
                extra = set(rule) - RULE_KEYS
                if extra:
                    raise MatrixError(
                        f"{where}: unknown key {sorted(extra)[0]!r}; accepted: {sorted(RULE_KEYS)}"
                    )
                if rule.get("get") not in OUTCOMES:
                    raise MatrixError(
                        f"{where}.get: {rule.get('get')!r}; accepted: {', '.join(OUTCOMES)}"
                    )
                if rule["get"] == "error" and (
                    not rule.get("text") or rule.get("at") not in ERROR_AT
                ):
                    raise MatrixError(
                        f"{where}: an error needs `text` and `at` (one of {', '.join(ERROR_AT)})"
                    )
                for key in CONDITIONS:
                    for v in _as_list(rule.get(key)):
                        if v not in values[key]:
                            raise MatrixError(
                                f"{where}.{key}: {v!r}; accepted: {', '.join(sorted(values[key]))}"
                            )

    def cells(self, releases: tuple[str, ...] | None = None) -> list[Cell]:
        return [
            Cell(pod, release, setup, security)
            for release in releases or self.releases
            for setup in self.setups
            for security in self.security
            for pod in self.pods
        ]

    def rule(self, cell: Cell) -> dict:
        """The first rule of the cell's pod whose conditions hold."""
        facts = {
            "containerd": self.containerd[cell.release],
            "setup": cell.setup,
            "security": cell.security,
        }
        for rule in self.pods[cell.pod]["expect"]:
            if all(rule.get(k) is None or facts[k] in _as_list(rule[k]) for k in CONDITIONS):
                return rule
        raise AssertionError("unreachable: the last rule has no condition")

    # ------------------------------------------------------------------ README

    def readme_table(self) -> str:
        head = ["pod (what the device plugin sends)"] + [
            f"containerd {v} ({RELEASE_NAMES.get(r, r)})" for r, v in self.containerd.items()
        ]
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for name, pod in self.pods.items():
            row = [pod["row"]]
            for release in self.releases:
                row.append(self._column_text(name, release))
            lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines) + "\n"

    def _column_text(self, pod: str, release: str) -> str:
        """The rules a column's cells reach, in order: `condition: outcome`, the last one
        alone when it is the only one reached."""
        reached = []
        for setup in self.setups:
            for security in self.security:
                rule = self.rule(Cell(pod, release, setup, security))
                if not any(rule is r for r in reached):
                    reached.append(rule)
        reached.sort(key=lambda r: next(i for i, x in enumerate(self.pods[pod]["expect"])
                                        if x is r))  # fmt: skip
        if len(reached) == 1:
            return _outcome_text(reached[0])
        parts = []
        for rule in reached:
            cond = [_condition_text(k, rule[k]) for k in ("setup", "security") if k in rule]
            parts.append(f"{', '.join(cond) or 'else'}: {_outcome_text(rule)}")
        return "; ".join(parts)


def _as_list(value) -> list:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


CONDITION_TEXT = {
    "runc": "no RuntimeClass",
    "nvidia": "RuntimeClass `nvidia`",
    "default": "gpunode the default",
    "secure": "secure",
    "open": "open",
}
OUTCOME_TEXT = {
    "allocated": "**exact**",
    "all": "**all GPUs**",
    "none": "no GPU",
    "nodes": "device nodes only",
}
LEGEND = (
    "**exact**: exactly the allocated GPUs or MIG devices (device nodes, MIG cap nodes, NVML "
    "UUIDs, `/proc/driver/nvidia/gpus`); no GPU: no device node and no driver library; "
    "*secure*: runtime.toml `accept-envvar-unprivileged = false`, `accept-volume-mounts = "
    "true`; *open*: `accept-envvar-unprivileged = true`; *no RuntimeClass*: runc the default, "
    "the pod names no RuntimeClass; a cell with one outcome holds for RuntimeClass `nvidia`, "
    "gpunode the default runtime and no RuntimeClass, secure and open alike."
)


def _condition_text(key: str, value) -> str:
    return " or ".join(CONDITION_TEXT.get(v, v) for v in _as_list(value))


def _outcome_text(rule: dict) -> str:
    error = f"fails: `{rule.get('text')}` ({rule.get('at')})"
    text = error if rule["get"] == "error" else OUTCOME_TEXT[rule["get"]]
    return f"{text} ({rule['note']})" if rule.get("note") else text


def load(path: Path = DATA) -> Matrix:
    try:
        data = yaml.safe_load(path.read_text())
        return Matrix(data)
    except (OSError, yaml.YAMLError) as exc:
        raise MatrixError(f"{path}: {exc}".splitlines()[0]) from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise MatrixError(f"{path}: malformed ({type(exc).__name__}: {exc})") from None


def readme_block(matrix: Matrix) -> str:
    legend = textwrap.fill(LEGEND, width=95, break_on_hyphens=False)
    return f"{BEGIN}\n\n{matrix.readme_table()}\n{legend}\n\n{END}"


def readme_with_table(readme: str, matrix: Matrix) -> str:
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise MatrixError(f"README.md: no {BEGIN!r} … {END!r} block")
    return readme[:start] + readme_block(matrix) + readme[end + len(END) :]


def main(argv: list[str]) -> int:
    try:
        matrix = load()
        if argv == ["--write-readme"]:
            README.write_text(readme_with_table(README.read_text(), matrix))
        elif not argv:
            sys.stdout.write(matrix.readme_table())
        else:
            sys.stderr.write(f"unknown arguments {argv}; accepted: --write-readme or none\n")
            return 2
    except MatrixError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
