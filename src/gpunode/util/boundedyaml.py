"""YAML the node does not control (a mig-parted config from a ConfigMap or a shared
repository, a validate vars file), loaded at a cost in proportion to its size.

PyYAML's safe_load builds an alias once and shares it, but three things still cost more
than the text: nesting recursion (5,000 ``[`` raise RecursionError from the composer), merge
keys (``<<: [*a, *a, ...]`` copies the merged pairs into each mapping: nine per level is 9**n
pairs), and any caller that walks or prints the value as a tree (an alias nine times per
level: 552 bytes expand to hundreds of MiB as text). So a document is at most MAX_BYTES,
composes at most MAX_NODES nodes (an alias counts as one each time it is used) nested at
most MAX_DEPTH deep, and merges at most MAX_NODES pairs in all; past any of these, or on
anything else PyYAML raises while loading it (a 5,000-digit int is a ValueError), it is one
``YamlError`` line. ``describe`` shows a value in at most 60 characters without walking
more of it than that.

yaml is imported on first use: gpunode's start path never loads this module.
"""

from __future__ import annotations

from typing import Any

MAX_BYTES = 1 << 20  # NVIDIA's mig-parted config of every layout of every GPU: ~20 KiB
MAX_NODES = 100_000
MAX_DEPTH = 64


class YamlError(ValueError):
    """One line: why the text is not a YAML document this module loads."""


_LOADER: Any = None


def _loader() -> Any:
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml
    from yaml.nodes import MappingNode, SequenceNode

    class Limit(yaml.YAMLError):
        def __init__(self, problem: str, mark: Any) -> None:
            super().__init__(problem)
            self.problem, self.problem_mark = problem, mark

    class Loader(yaml.SafeLoader):
        nodes = depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.nodes += 1
            if self.nodes > MAX_NODES:
                mark = self.peek_event().start_mark
                raise Limit(f"more than {MAX_NODES} nodes (aliases counted each use)", mark)
            if self.depth >= MAX_DEPTH:
                raise Limit(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def flatten_mapping(self, node: Any) -> None:
            # Count what a merge copies before PyYAML copies it: the merged mappings are
            # flattened first (in place, so PyYAML's own pass over them finds nothing left).
            for key, value in node.value:
                if key.tag != "tag:yaml.org,2002:merge":
                    continue
                subs = value.value if isinstance(value, SequenceNode) else [value]
                for sub in subs:
                    if isinstance(sub, MappingNode):
                        self.flatten_mapping(sub)
                        self.nodes += len(sub.value)
                if self.nodes > MAX_NODES:
                    raise Limit(f"merge keys copy more than {MAX_NODES} pairs", key.start_mark)
            super().flatten_mapping(node)

    _LOADER = (Loader, yaml.YAMLError)
    return _LOADER


def loads(text: str) -> Any:
    """The document in ``text``; YamlError (one line) for anything else."""
    if len(text) > MAX_BYTES:
        raise YamlError(f"larger than {MAX_BYTES} bytes")
    loader, yaml_error = _loader()
    try:
        return loader(text).get_single_data()
    except yaml_error as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid"
        raise YamlError(f"not valid YAML{at}: {' '.join(str(problem).split())[:120]}") from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # a constructor's own error (int() of 5,000 digits, a bad date), or a bound missed
        why = " ".join(str(exc).split())[:120]
        raise YamlError(f"not valid YAML: {type(exc).__name__}: {why}") from None


def load_file(path: str) -> Any:
    """The document in the file at ``path``, read up to MAX_BYTES; YamlError (one line,
    naming the path) for anything else, an unreadable file included."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise YamlError(f"{path}: not UTF-8 text") from None
    try:
        return loads(text)
    except YamlError as exc:
        raise YamlError(f"{path}: {exc}") from None


_KINDS = {
    dict: ("a mapping", "keys"),
    list: ("a list", "items"),
    set: ("a set", "items"),
    str: ("a string", "characters"),
    bytes: ("binary data", "bytes"),
}


def describe(value: Any, limit: int = 60) -> str:
    """``value`` as Python would show it, when that fits in ``limit`` characters; else its
    start and, for a mapping, list or string, its type and size. Never walks more of the
    value than the text it shows (an alias bomb costs what 60 characters cost)."""
    out: list[str] = []
    room = [limit + 1]

    class Full(Exception):
        pass

    def emit(text: str) -> None:
        out.append(text[: room[0]])
        room[0] -= len(text)
        if room[0] <= 0:
            raise Full

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            emit("{")
            for i, (k, x) in enumerate(v.items()):
                emit(", " if i else "")
                walk(k)
                emit(": ")
                walk(x)
            emit("}")
        elif isinstance(v, list | tuple | set | frozenset):
            ends = "[]" if isinstance(v, list) else "()" if isinstance(v, tuple) else "{}"
            emit(ends[0])
            for i, x in enumerate(v):
                emit(", " if i else "")
                walk(x)
            emit(ends[1])
        elif isinstance(v, str | bytes):
            emit(repr(v[: room[0]]))
        elif isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 192:
            emit(f"<an integer of {v.bit_length()} bits>")
        else:
            emit(repr(v)[: room[0]])

    try:
        walk(value)
        return "".join(out)
    except (Full, RecursionError):
        pass
    kind = _KINDS.get(type(value))
    if kind is None:
        return "".join(out)[: limit - 3] + "..."
    size = f"{kind[0]} of {len(value)} {kind[1]}"
    return "".join(out)[: max(limit - len(size) - 6, 10)] + f"... ({size})"
