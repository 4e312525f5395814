"""gpunode.util.fastjson: the start path's JSON, the same as json's (C accelerator)."""

from __future__ import annotations

import json

import pytest

from gpunode.util import fastjson

GOOD = [
    b'{"a": [1, 2.5, true, false, null, "\\u00e9x\\n"], "b": {}}',
    b"  [] \n",
    b'\xef\xbb\xbf{"bom": 1}',
    '{"utf8": "\u00e9\u2028"}'.encode(),
    b'"x"',
    b'{"n": NaN, "i": -Infinity}',
    b"-0",
    b"1e400",
    '{"a": 1}'.encode("utf-16"),
]
BAD = [b"", b"   ", b"{", b"{} x", b"[1,]", b'{"a":1,}', b'"\x01"', b"\xff", b"[1] [2]"]


@pytest.mark.parametrize("raw", GOOD)
def test_loads_as_json_does(raw):
    assert repr(fastjson.loads(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("raw", BAD)
def test_loads_errors_are_value_errors_as_json_does(raw):
    with pytest.raises(ValueError) as ours:
        fastjson.loads(raw)
    with pytest.raises(ValueError) as theirs:
        json.loads(raw)
    if not isinstance(theirs.value, UnicodeDecodeError):
        assert str(ours.value) == str(theirs.value)


def test_dumps_is_compact_json():
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": ["A=\u00e9", 'B="\\'], "args": [], "terminal": False},
        "linux": {"devices": [{"major": 195, "minor": 0, "fileMode": 438}], "x": None},
        "f": [-1.5e-300, 1e300, float("inf")],
    }
    assert fastjson.dumps(spec) == json.dumps(spec, separators=(",", ":"))
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        fastjson.dumps({"a": {1}})
