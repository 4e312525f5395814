"""JSON for the container start path through CPython's C accelerator (``_json``) directly.

``import json`` costs ~3 ms on every GPU container start, most of it ``re`` (and ``enum``)
for the pure-Python fallbacks the C scanner and encoder never use. These two functions
build the same C scanner and encoder ``json`` would (strict, ``ensure_ascii``, compact
separators) without importing it. A decoding error is ``json``'s own JSONDecodeError (a
ValueError; the C code imports json.decoder only then).
"""

from __future__ import annotations

import _json

_WS = " \t\n\r"


def _constant(name: str) -> float:
    return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


class _Context:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)
    memo: dict = {}


_scan = _json.make_scanner(_Context())


def _not_serializable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_encode = _json.make_encoder(
    None, _not_serializable, _json.encode_basestring_ascii, None, ":", ",", False, False, True
)


def _error(msg: str, doc: str, pos: int) -> ValueError:
    from json.decoder import JSONDecodeError

    return JSONDecodeError(msg, doc, pos)


def loads(data: bytes | str):
    """json.loads for UTF-8 bytes (a BOM allowed, as json.loads allows it) or a str."""
    if isinstance(data, bytes):
        if b"\x00" in data[:4]:  # UTF-16/32: json's own detection
            import json

            return json.loads(data)
        data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
        data = data.decode("utf-8")
    start = len(data) - len(data.lstrip(_WS))
    try:
        obj, end = _scan(data, start)
    except StopIteration as exc:
        raise _error("Expecting value", data, exc.value) from None
    end = len(data) - len(data[end:].lstrip(_WS)) if end < len(data) else end
    if end != len(data):
        raise _error("Extra data", data, end)
    return obj


def dumps(obj) -> str:
    """json.dumps(obj, separators=(",", ":"))."""
    return "".join(_encode(obj, 0))
