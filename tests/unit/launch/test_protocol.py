"""gpunode.launch.protocol: the conversation's words are defined once — as literals only in
protocol.py among the Python modules, never spelled in the sh templates (they get them
rendered in) — and a request's name is parsed within its bounds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpunode.launch import firststage, protocol

LAUNCH = Path(protocol.__file__).parent
WORDS = (protocol.RUN, protocol.EXEC, protocol.EXIT, protocol.FAIL, protocol.PYTHON)


def _literals(path: Path) -> list[str]:
    """The string literals of a module that are an answer word or start one ("exit 0"),
    docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docs
                and any(node.value == w or node.value.startswith(w + " ") for w in WORDS)):  # fmt: skip
            out.append(node.value)
    return out


def test_the_answer_words_are_literals_only_in_the_protocol_module():
    found = {p.name: _literals(p) for p in sorted(LAUNCH.glob("*.py"))}
    found = {k: v for k, v in found.items() if v}
    assert set(found) == {"protocol.py"}
    assert sorted(found["protocol.py"]) == sorted(WORDS)  # each once


# how a word would be spelled in sh: in a case pattern, a prefix removal or a string
SPELLED = [re.compile(rf'"{w} |#{w} |^\s*{w}\)|\|{w}\)') for w in WORDS]


@pytest.mark.parametrize("template", ["dispatcher.sh", "hookstage.sh", "resident.sh"])
def test_the_templates_never_spell_an_answer_word(template):
    lines = [ln.split(" # ")[0] for ln in (LAUNCH / template).read_text().splitlines()
             if not ln.lstrip().startswith("#")]  # fmt: skip
    found = [ln for ln in lines for rx in SPELLED if rx.search(ln)]
    assert found == []


def test_the_rendered_stages_speak_the_protocols_words():
    text = firststage.dispatcher("/usr/local/bin/gpunode-container-runtime.py")
    for w in (protocol.RUN, protocol.EXEC, protocol.EXIT, protocol.FAIL):
        assert f'"{w} ' in text
    assert f"    {protocol.PYTHON})" in text
    assert f"exec {protocol.FD_ANSWERS}<>" in text
    assert "@" not in text.replace('"$@"', "")  # every placeholder rendered


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("q.create.123.456.7", ("create", 123, 456, 7)),
        ("q.nvhook.1.0.1", ("nvhook", 1, 0, 1)),
        ("q.hook.4294967295.18446744073709551615.9999", ("hook", 4294967295, 18446744073709551615, 9999)),
        ("q.create.12345678901.1.1", None),  # a pid of 11 digits
        ("q.create.1.123456789012345678901.1", None),
        ("q.create.1.1.12345", None),
        ("q.create.0.1.1", None),
        ("q.create.1.1.0", None),
        ("q.create.-1.1.1", None),
        ("q.create.1.1", None),
        ("q.create.1.1.1.1", None),
        ("q.other.1.1.1", None),
        ("c.1.1.r", None),
        ("q.create.\uff11.1.1", None),  # a digit, but not an ASCII one
    ],
)
def test_request_names_are_parsed_within_their_bounds(name, want):
    assert protocol.parse_request(name) == want


def test_a_request_name_round_trips():
    assert protocol.parse_request(protocol.request_name("hook", 42, 7, 3)) == ("hook", 42, 7, 3)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("c.123.456.r", [123, 456]),
        ("c.123.456.w", [123, 456]),
        ("c.123.456", None),
        ("c.123.r", None),
        ("c.12345678901.1.r", None),
        ("c.1.x.w", None),
        ("notes.r", None),
        ("q.create.1.1.1", None),
    ],
)
def test_conversation_names_are_parsed_within_their_bounds(name, want):
    assert protocol.parse_conversation(name) == want
