"""The one PCI bus-id parser, held against the four it replaces: the regexes of the request
parser and the profiles (lenient) and the hook's hand-written one (strict)."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpunode.nvidia.busid import BusId

# What gpunode.requests and gpunode.profiles matched before (the same grammar).
OLD_LENIENT = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})"
    r"\.(?P<fn>[0-7])$"
)


def old_lenient(text: str):
    m = OLD_LENIENT.fullmatch(text.strip())
    if not m:
        return None
    return (int(m["dom"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16), int(m["fn"]))


def old_strict(text: str):
    """gpunode.hook.busid_candidates' check before (None: refused)."""
    text = text.strip().lower()
    parts = text.split(":")
    ok = len(parts) == 3 and "." in parts[2]
    if ok:
        dom, bus = parts[0], parts[1]
        dev, _, fn = parts[2].partition(".")
        ok = (
            4 <= len(dom) <= 8
            and len(bus) == 2
            and len(dev) == 2
            and len(fn) == 1
            and fn in "01234567"
            and set(dom + bus + dev) <= frozenset("0123456789abcdef")
        )
    if not ok:
        return None
    return (int(dom, 16), int(bus, 16), int(dev, 16), int(fn))


def new(text: str, strict: bool):
    try:
        b = BusId.parse(text, strict=strict)
    except ValueError:
        return None
    return (b.domain, b.bus, b.device, b.function)


# Strings built from the characters bus ids are made of, plus a few that trip parsers.
bus_texts = st.text(alphabet="0123456789abcdefABCDEFgG:. \t\n_+-x/", max_size=20)


@settings(max_examples=3000, deadline=None)
@given(bus_texts)
@example("0000:07:00.0")
@example(" 7:0.7 ")
@example("00000000:07:00.0\n")
@example("0_0:07:00.0")
@example("+0:07:00.0")
@example("07:00.8")
@example("")
def test_same_verdicts_as_the_parsers_it_replaces(text):
    assert new(text, strict=False) == old_lenient(text)
    assert new(text, strict=True) == old_strict(text)


def test_forms():
    b = BusId.parse("0000:0F:00.1")
    assert (b.nvml, b.procfs) == ("00000000:0F:00.1", "0000:0f:00.1")
    assert BusId.parse("7:0.0") == BusId(0, 7, 0, 0) == BusId.parse("00000000:07:00.0")
    assert BusId.parse("00010000:07:00.1").procfs_names() == ["00010000:07:00.1"]
    assert BusId.parse("0000:07:00.0").procfs_names() == ["00000000:07:00.0", "0000:07:00.0"]
    with pytest.raises(ValueError):
        BusId.parse("07:00.0", strict=True)
