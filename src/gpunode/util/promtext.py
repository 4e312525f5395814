"""Prometheus's text exposition format, written the one way (validate's and watch's
textfiles for node_exporter's textfile collector): label values escaped, numbers exact, a
family as its HELP and TYPE lines and its samples."""

from __future__ import annotations


def escape(value: object) -> str:
    """A label value: backslash, newline and double quote escaped (None is "")."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value: float) -> str:
    """Exactly, in the exposition format: integers without exponent or fraction."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def labels(**values: object) -> str:
    """``{name="value",...}`` in the order given."""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in values.items()) + "}"


def family(
    name: str, help_text: str, samples: list[tuple[str, float]], kind: str = "gauge"
) -> list[str]:
    """The lines of one metric family: HELP, TYPE, a sample per (labels, value)."""
    help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return [f"# HELP {name} {help_line}", f"# TYPE {name} {kind}",
            *(f"{name}{lab} {number(value)}" for lab, value in samples)]  # fmt: skip
