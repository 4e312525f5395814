"""`gpunode runtime configure containerd`: register gpunode's OCI runtime with containerd.

containerd: the runtime goes into the drop-in ``<drop_in_dir>/99-gpunode.toml`` and the main
config only gains ``<drop_in_dir>/*.toml`` in its top-level ``imports``, edited textually so that
comments and layout survive. containerd < 2.0 (Debian 12: 1.6, Debian 13: 1.7) replaces, rather
than merges, a plugin section that an imported file defines, so there the drop-in must carry
the whole CRI plugin section, and the new runtime copies the options of the default runc
runtime (``SystemdCgroup`` and so on).

The CRI section copied is the one containerd itself resolves: ``containerd --config <copy>
config dump``, where ``<copy>`` is the main config with the imports it will have after this
run, minus gpunode's own drop-in (the drop-in directory's other files are listed in place of
the glob). Decided so because

* settings in other drop-ins (``sandbox_image``, ``registry.config_path``...) live only in the
  merged configuration: a copy of the main config's section would put them back to defaults;
* containerd's own merge (import order, globs, relative paths, nested imports, per-file
  version migration) is used rather than an imitation of it that could drift;
* leaving our own drop-in out means the copy is never taken from itself: CRI settings changed
  elsewhere after the first run are picked up by the next run.

The copy is a snapshot that includes containerd's defaults: after changing CRI settings in
another file or upgrading containerd, run configure again (it is idempotent).

containerd 2.x (Debian 14: 2.1; the one whose dump is config version 3) merges the plugin
tables of imported files key by key (containerd#9982, 2.0) and migrates the merged result as
one config of the highest version among its files. There the drop-in carries only gpunode's
keys — the handler entries (still each a copy of the default runc entry from the dump), the
default runtime, ``enable_cdi``, ``cdi_spec_dirs`` — written in the main config's own version
(Debian 14 ships a version 2 ``config.toml``: a version 3 drop-in beside it would leave its
``sandbox_image`` and CNI settings unread; measured on containerd 2.1.9). A handler entry's
keys are the same in both layouts there.

Kubernetes nodes (issue 19): one drop-in registers every handler name asked for (``gpunode``,
``nvidia`` — the handler NVIDIA's device plugin and GPU Operator expect), each a runc-v2
runtime with gpunode's executable; ``runc`` stays declared (pods without a RuntimeClass keep
it when gpunode is not the default); ``cdi`` sets ``enable_cdi`` in the CRI plugin that
holds the runtimes (version 2: ``io.containerd.grpc.v1.cri``, version 3:
``io.containerd.cri.v1.runtime``), refused on containerd < 1.7.0, which has no CDI and would
silently start CDI requests without a GPU; ``cdi_spec_dirs`` are added to the section's
own (kept); ``container_annotations`` are added to each gpunode handler's (kept), so a
runtime with ``annotation-prefixes`` sees ``cdi.k8s.io/*`` annotations where containerd
does not resolve them itself (1.6).
Without ``containerd`` on PATH the main config's CRI section is copied, which is exact only if
nothing else would be loaded; if another imported file exists the run is refused.
"""

from __future__ import annotations

import copy
import datetime as _dt
import glob
import math
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass

from ..util import tool
from ..util.tool import one_line
from .common import (
    ConfigureResult,
    EngineConfigError,
    EngineRunError,
    Registration,
    decode,
    locked,
    makedirs,
    prepare,
    read,
    real_path,
    replace_with_backup,
    run_tool,
    write,
)

# The containerd executable whose `config dump` gives the merged configuration; tests point
# this at a fake.
CONTAINERD = "containerd"
DROP_IN_NAME = "99-gpunode.toml"
RUNC_SHIM = "io.containerd.runc.v2"
CRI_PLUGINS = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
CONFIG_TOML = "/etc/containerd/config.toml"
DROP_IN_DIR = "/etc/containerd/conf.d"
# containerd's CRI plugin knows enable_cdi / cdi_spec_dirs from 1.7.0 (CDI from annotations);
# ContainerConfig.CDI_devices from the CRI API is honoured from 1.7.2.
CDI_MIN_VERSION = (1, 7, 0)
CDI_DEVICES_MIN_VERSION = (1, 7, 2)


# --------------------------------------------------------------------------- TOML writing

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_TOML_ESCAPES["\r"] = "\\r"


def toml_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, _dt.datetime | _dt.date | _dt.time):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def toml_dumps(data: dict) -> str:
    """A small TOML writer for the types tomllib produces (arrays are written inline)."""
    lines: list[str] = []

    def table(path: list[str], t: dict) -> None:
        scalars = [(k, v) for k, v in t.items() if not isinstance(v, dict)]
        subtables = [(k, v) for k, v in t.items() if isinstance(v, dict)]
        if path and (scalars or not subtables):
            if lines:
                lines.append("")
            lines.append("[" + ".".join(toml_key(p) for p in path) + "]")
        lines.extend(f"{toml_key(k)} = {toml_value(v)}" for k, v in scalars)
        for k, v in subtables:
            table([*path, k], v)

    table([], data)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- containerd


@dataclass(frozen=True)
class Handlers:
    """containerd-only options: the handler names (the first becomes the default runtime with
    ``set_default``), CDI spec directories, annotation patterns passed to gpunode's handlers."""

    names: tuple[str, ...]
    cdi_spec_dirs: tuple[str, ...] = ()
    container_annotations: tuple[str, ...] = ()


def handlers(
    path: str,
    names: Sequence[str],
    cdi_spec_dirs: Sequence[str] = (),
    container_annotations: Sequence[str] = (),
) -> Handlers:
    """Checked options (bad input: one line naming the value and what is accepted)."""
    if not names:
        raise EngineConfigError(f"{path}: no runtime name given; give at least one")
    seen: list[str] = []
    for name in names:
        if not name:
            raise EngineConfigError(f"{path}: runtime name and path must not be empty")
        if name == "runc":
            raise EngineConfigError(
                f"{path}: runtime name 'runc' would replace containerd's runc; "
                "choose another name (e.g. gpunode or nvidia)"
            )
        if name not in seen:
            seen.append(name)
    for d in cdi_spec_dirs:
        if not os.path.isabs(d):
            raise EngineConfigError(
                f"{path}: CDI spec directory {d!r} is not absolute; give an absolute path"
            )
    for pattern in container_annotations:
        if not pattern or any(ch.isspace() for ch in pattern) or "*" in pattern[:-1]:
            raise EngineConfigError(
                f"{path}: annotation pattern {pattern!r} is not accepted; give a key or a "
                "prefix ending in '*' (e.g. cdi.k8s.io/*), without spaces"
            )
    return Handlers(tuple(seen), tuple(cdi_spec_dirs), tuple(container_annotations))


def annotation_patterns(prefixes: Sequence[str]) -> tuple[str, ...]:
    """containerd's ``container_annotations`` patterns for runtime.toml's annotation-prefixes
    (``cdi.k8s.io/`` -> ``cdi.k8s.io/*``)."""
    return tuple(p if p.endswith("*") else p + "*" for p in prefixes)


def installed_version() -> tuple[tuple[int, int, int] | None, str]:
    """(containerd's version, the line it printed) from ``containerd --version``; (None, why)
    when it is not installed or prints no version."""
    exe = shutil.which(CONTAINERD)
    if exe is None:
        return None, f"{CONTAINERD} not found on PATH"
    return tool.version([exe, "--version"])


def check_cdi(path: str) -> tuple[int, int, int] | None:
    """Refuse CDI on a containerd that has none (< 1.7.0: enable_cdi would be ignored and CDI
    requests would start without a GPU, silently). Returns the version (None: containerd not
    installed yet; nothing to refuse)."""
    version, line = installed_version()
    if version is not None and version < CDI_MIN_VERSION:
        need = ".".join(map(str, CDI_MIN_VERSION))
        have = ".".join(map(str, version))
        raise EngineConfigError(
            f"{path}: containerd {have} has no CDI (enable_cdi needs containerd >= {need}, "
            f"CRI CDI_devices >= 1.7.2; {line}); register without CDI and use "
            "NVIDIA_VISIBLE_DEVICES or cdi.k8s.io annotations through gpunode's handler; "
            "left unchanged"
        )
    return version


def runtimes_section(config: dict) -> dict | None:
    """The CRI section holding ``containerd.runtimes`` in a configuration (a file or
    ``containerd config dump``), chosen by its ``version``: 3 (containerd 2.x, which dumps
    every config as version 3) ``io.containerd.cri.v1.runtime`` — there
    ``io.containerd.grpc.v1.cri`` still exists, holding the CRI's gRPC streaming settings
    only —, else ``io.containerd.grpc.v1.cri``. None when absent."""
    plugins = config.get("plugins")
    version = config.get("version")
    plugin = CRI_PLUGINS[version if version in CRI_PLUGINS else 2]
    section = plugins.get(plugin) if isinstance(plugins, dict) else None
    return section if isinstance(section, dict) else None


def _containerd_version(path: str, data: dict) -> tuple[int, bool]:
    """(version, version_missing)."""
    version = data.get("version")
    v1 = (
        f"{path}: containerd config version 1 is not supported; "
        "migrate with `containerd config migrate`"
    )
    if version is None:
        if data:
            raise EngineConfigError(v1)
        return 2, True
    if type(version) is not int:
        raise EngineConfigError(f"{path}: 'version' is not an integer; left unchanged")
    if version == 1:
        raise EngineConfigError(v1)
    if version not in CRI_PLUGINS:
        raise EngineConfigError(f"{path}: containerd config version {version} is not supported")
    return version, False


def _table(path: str, parent: dict, key: str, dotted: str) -> dict:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise EngineConfigError(f"{path}: '{dotted}' is not a table; left unchanged")
    return value


def _new_entry(runtimes: dict, ctd: dict, names: tuple[str, ...]) -> dict:
    """A handler's starting point: a copy of the default runc-based runtime (so options such
    as SystemdCgroup carry over), else of runc, else empty."""
    base_name = ctd.get("default_runtime_name", "runc")
    candidates = [base_name, "runc"] if base_name not in names else ["runc"]
    for cand in candidates:
        base = runtimes.get(cand)
        if isinstance(base, dict) and base.get("runtime_type", RUNC_SHIM) == RUNC_SHIM:
            return copy.deepcopy(base)
    return {}


def _added(old: object, new: tuple[str, ...]) -> list:
    """``old`` (a list kept as it is) with the items of ``new`` it lacks appended."""
    out = list(old) if isinstance(old, list) else []
    out.extend(x for x in new if x not in out)
    return out


def _drop_in_data(
    path: str,
    data: dict,
    version: int,
    old_drop_in: dict,
    reg: Registration,
    opts: Handlers,
    merges_as: int | None = None,
) -> dict:
    """The drop-in's content from the merged configuration ``data`` (config ``version``).
    ``merges_as``: containerd merges plugin sections (2.x) and the drop-in is written in
    that config version (the main config's), carrying only what gpunode sets."""
    names = opts.names
    plugin = CRI_PLUGINS[version]
    main = copy.deepcopy(data)
    plugins = _table(path, main, "plugins", "plugins")
    cri = _table(path, plugins, plugin, f'plugins."{plugin}"')
    ctd = _table(path, cri, "containerd", f'plugins."{plugin}".containerd')
    runtimes = _table(path, ctd, "runtimes", f'plugins."{plugin}".containerd.runtimes')

    # runc stays declared: pods without a RuntimeClass (or with handler runc) need it also
    # where gpunode becomes the default.
    runc = runtimes.get("runc")
    set_runtimes = list(names)
    if not isinstance(runc, dict):
        runtimes["runc"] = {"runtime_type": RUNC_SHIM}
        set_runtimes.append("runc")
    entries = {}
    for name in names:
        entry = runtimes.get(name)
        entries[name] = entry if isinstance(entry, dict) else _new_entry(runtimes, ctd, names)
    for name, entry in entries.items():
        entry["runtime_type"] = RUNC_SHIM
        options = entry.get("options")
        entry["options"] = options = options if isinstance(options, dict) else {}
        options["BinaryName"] = reg.runtime_path
        if opts.container_annotations:
            entry["container_annotations"] = _added(
                entry.get("container_annotations"), opts.container_annotations
            )
        runtimes[name] = entry

    # Like docker's default-runtime and features.cdi, what an earlier run set is not taken back.
    old_cri = runtimes_section(old_drop_in) or {}
    old_ctd = old_cri.get("containerd", {})
    old_default = old_ctd.get("default_runtime_name") if isinstance(old_ctd, dict) else None
    if reg.set_default:
        ctd["default_runtime_name"] = names[0]
    elif old_default in names:
        ctd["default_runtime_name"] = old_default
    if reg.cdi or old_cri.get("enable_cdi") is True:
        cri["enable_cdi"] = True
    if opts.cdi_spec_dirs:
        cri["cdi_spec_dirs"] = _added(cri.get("cdi_spec_dirs"), opts.cdi_spec_dirs)
    if merges_as is None:
        return {"version": version, "plugins": {plugin: cri}}
    # Only gpunode's keys, in the main config's version: containerd 2.x merges the files'
    # plugin tables key by key (containerd#9982) and then migrates the result as one config
    # of the highest version it read, so a version 3 drop-in beside a version 2 main config
    # (Debian's) would leave the main config's CRI settings unread (sandbox_image...). A
    # handler entry's keys are the same in both layouts (one struct in containerd 2.x).
    out_ctd: dict = {"runtimes": {name: runtimes[name] for name in set_runtimes}}
    if "default_runtime_name" in ctd and (reg.set_default or old_default in names):
        out_ctd["default_runtime_name"] = ctd["default_runtime_name"]
    out: dict = {}
    if cri.get("enable_cdi") is True and (reg.cdi or old_cri.get("enable_cdi") is True):
        out["enable_cdi"] = True
    if opts.cdi_spec_dirs:
        out["cdi_spec_dirs"] = cri["cdi_spec_dirs"]
    out["containerd"] = out_ctd
    return {"version": merges_as, "plugins": {CRI_PLUGINS[merges_as]: out}}


def _scan_array_end(text: str, start: int) -> tuple[int, int]:
    """For the array opening at ``text[start] == '['``: (index of its closing ']', index just
    after the last significant character inside it, or start + 1 if it is empty)."""
    depth, i, last = 0, start, start + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch in "\"'":
            triple = text.startswith(ch * 3, i)
            quote = ch * 3 if triple else ch
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                j += 2 if ch == '"' and text[j] == "\\" else 1
            if j >= n:
                break
            i = j + len(quote)
            last = i
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i, last
        if not ch.isspace() and i != start:
            last = i + 1
        i += 1
    raise ValueError("unterminated array")


def _add_import(path: str, text: str, glob: str, version_missing: bool) -> str:
    header = re.search(r"^[ \t]*\[", text, re.M)
    top = text[: header.start() if header else len(text)]
    item = toml_string(glob)
    m = re.search(r"""^[ \t]*(?:imports|"imports"|'imports')[ \t]*=[ \t]*""", top, re.M)
    if m is not None:
        if not text.startswith("[", m.end()):
            raise EngineConfigError(f"{path}: top-level 'imports' is not an array; left unchanged")
        try:
            _end, last = _scan_array_end(text, m.end())
        except ValueError as exc:
            raise EngineConfigError(f"{path}: cannot parse the imports array") from exc
        prev = text[last - 1]
        sep = "" if prev == "[" else " " if prev == "," else ", "
        return text[:last] + sep + item + text[last:]
    line = f"imports = [{item}]"
    if version_missing:
        rest = text.lstrip("\n")
        return f"version = 2\n{line}\n" + ("\n" + rest if rest else "")
    v = re.search(r"^[ \t]*(?:version|\"version\"|'version')[ \t]*=.*$", top, re.M)
    if v is None:
        raise EngineConfigError(f"{path}: cannot find the top-level 'version' line to edit")
    return text[: v.end()] + "\n" + line + text[v.end() :]


def _resolved_imports(path: str, imports: list, glob_: str, drop_in: str) -> list[str]:
    """``imports`` for containerd to load everything but gpunode's drop-in: the drop-in
    directory's other files in place of its glob (sorted, as containerd's glob is), the drop-in
    itself left out, relative file paths made absolute against the main config's directory (as
    containerd resolves them; glob patterns it resolves as given)."""
    base = os.path.dirname(os.path.abspath(path))
    out: list[str] = []
    for entry in imports:
        if not isinstance(entry, str):
            raise EngineConfigError(f"{path}: 'imports' holds a non-string {entry!r}")
        if entry == drop_in:
            continue
        if entry == glob_:
            out.extend(f for f in sorted(glob.glob(glob_, include_hidden=True)) if f != drop_in)
        elif "*" in entry or os.path.isabs(entry):
            out.append(entry)
        else:
            out.append(os.path.normpath(os.path.join(base, entry)))
    return out


def _containerd_dump(path: str, data: dict, version: int, imports: list[str]) -> dict | None:
    """containerd's merged configuration of ``data`` with ``imports``; None without containerd."""
    exe = shutil.which(CONTAINERD)
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="gpunode-containerd-") as tmpdir:
        tmp = os.path.join(tmpdir, "config.toml")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(toml_dumps({**data, "version": version, "imports": imports}))
        cmd = f"{exe} config dump"
        proc = run_tool(path, f"`{cmd}`", [exe, "--config", tmp, "config", "dump"])
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.replace(tmp, path).splitlines()]
        first = next((ln for ln in reversed(lines) if ln), f"exit status {proc.returncode}")
        raise EngineConfigError(f"{path}: `{cmd}` failed: {first}; left unchanged")
    try:
        return tomllib.loads(proc.stdout)
    except tomllib.TOMLDecodeError as exc:
        raise EngineRunError(
            f"{path}: cannot read the output of `{cmd}` ({one_line(str(exc))}); left unchanged"
        ) from exc


def _merged_config(
    path: str, data: dict, version: int, imports: list[str]
) -> tuple[dict, int, str, bool]:
    """(config to copy the CRI section from, its version, where it came from, whether this
    containerd merges plugin sections: 2.x, the one that dumps version 3)."""
    dumped = _containerd_dump(path, data, version, imports)
    if dumped is not None:
        dump_version = dumped.get("version")
        merges = False
        if dump_version in CRI_PLUGINS and CRI_PLUGINS[dump_version] in dumped.get("plugins", {}):
            merges = dump_version == 3  # containerd 2.x migrates a version 2 config to 3
            version = dump_version
        return dumped, version, "containerd config dump (main config and its imports)", merges
    loaded = [
        e
        for e in imports
        if (glob.glob(e, include_hidden=True) if "*" in e else os.path.lexists(e))
    ]
    if loaded:
        raise EngineRunError(
            f"{path}: {CONTAINERD} not found on PATH, needed to merge the CRI settings of "
            f"imported {loaded[0]}; install containerd first; left unchanged"
        )
    return data, version, "the main config (nothing else is imported)", False


def configure_containerd(
    path: str = CONFIG_TOML,
    *,
    dry_run: bool = False,
    drop_in_dir: str = DROP_IN_DIR,
    names: Sequence[str] | None = None,
    cdi_spec_dirs: Sequence[str] = (),
    container_annotations: Sequence[str] = (),
    **registration,
) -> ConfigureResult:
    """Write the drop-in registering the runtime (keywords of :class:`Registration`; ``names``
    replaces its one ``runtime_name`` by several handler names) and make the main config
    import it."""
    reg = Registration(**registration)
    real = prepare(path, reg)
    opts = handlers(
        path, list(names) if names else [reg.runtime_name], cdi_spec_dirs, container_annotations
    )
    if reg.cdi:
        check_cdi(path)
    drop_in = os.path.join(drop_in_dir, DROP_IN_NAME)
    drop_real = real_path(drop_in)
    with locked(real, dry_run):
        return _configure_containerd(
            path, real, drop_in, drop_real, drop_in_dir, reg, opts, dry_run
        )


def _configure_containerd(
    path: str,
    real: str,
    drop_in: str,
    drop_real: str,
    drop_in_dir: str,
    reg: Registration,
    opts: Handlers,
    dry_run: bool,
) -> ConfigureResult:
    old, old_stat = read(real)
    text = decode(path, old)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EngineConfigError(
            f"{path}: not valid TOML ({one_line(str(exc))}); left unchanged"
        ) from exc
    version, version_missing = _containerd_version(path, data)
    glob_ = os.path.join(drop_in_dir, "*.toml")
    imports = data.get("imports", [])
    if not isinstance(imports, list):
        raise EngineConfigError(f"{path}: top-level 'imports' is not an array; left unchanged")
    main_changed = old is None or (glob_ not in imports and drop_in not in imports)
    final_imports = [*imports, glob_] if main_changed else imports

    # The drop-in: fully generated, compared byte for byte.
    old_drop, old_drop_stat = read(drop_real)
    try:
        old_drop_data = tomllib.loads(old_drop.decode("utf-8")) if old_drop else {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        old_drop_data = {}  # our own file, regenerated below
    merged, drop_version, source, merges = _merged_config(
        path, data, version, _resolved_imports(path, final_imports, glob_, drop_in)
    )
    drop_data = _drop_in_data(
        path, merged, drop_version, old_drop_data, reg, opts, version if merges else None
    )
    if merges:
        about = (
            "# Carries gpunode's handlers and CDI settings only, in the main config's version:\n"
            "# containerd 2.x merges plugin sections of imported files key by key.\n"
        )
    else:
        about = (
            "# Carries a copy of the whole CRI plugin section, because containerd < 2.0\n"
            "# replaces, rather than merges, a plugin section defined in an imported file.\n"
        )
    drop_content = (
        "# Written by `gpunode runtime configure containerd`; regenerated on every run.\n"
        + about
        + "# Run configure again after changing CRI settings elsewhere or upgrading containerd.\n"
        f"# Main config: {one_line(path)}\n"
        f"# CRI section from: {source}\n" + toml_dumps(drop_data)
    )
    if tomllib.loads(drop_content) != drop_data:  # pragma: no cover - writer self-check
        raise EngineConfigError(f"{drop_in}: generated TOML does not round-trip; nothing written")
    drop_changed = old_drop is None or old_drop.decode("utf-8", "replace") != drop_content

    # The main config: only `imports` (and `version` for an empty file), edited as text.
    content = text
    if main_changed:
        content = _add_import(path, text, glob_, version_missing)
        expected = {**data, "imports": final_imports}
        if version_missing:
            expected["version"] = 2
        try:
            ok = tomllib.loads(content) == expected
        except tomllib.TOMLDecodeError:
            ok = False
        if not ok:
            raise EngineConfigError(
                f"{path}: could not add {glob_} to imports without changing other settings; "
                "left unchanged"
            )

    changed = main_changed or drop_changed
    result = ConfigureResult(
        path,
        changed,
        None,
        content,
        None,
        drop_in,
        drop_content,
        dry_run=dry_run,
        before=None if old is None else text,
        drop_in_before=None if old_drop is None else old_drop.decode("utf-8", "replace"),
    )
    if dry_run:
        return result
    if drop_changed:  # first, so the import never points at a half-configured runtime
        makedirs(os.path.dirname(drop_real) or ".")
        write(drop_real, drop_content.encode("utf-8"), old_drop_stat)
    if main_changed:
        result.backup = replace_with_backup(real, content, old, old_stat)
    return result
