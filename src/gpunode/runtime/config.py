"""Runtime configuration: /etc/gpunode/runtime.toml (read with tomllib).

Every key is optional; the defaults below are what an absent file means. Unknown keys and
wrong types are errors (one line naming the key, the value and what is accepted), so a
typo never silently falls back to a default.

```toml
# low-level OCI runtimes, first found wins (name on PATH or absolute path)
runtimes = ["runc", "crun"]
log-file = "/var/log/gpunode-runtime.log"   # "" disables the file log
log-level = "info"                          # debug, info, warning, error
# where the driver's files live (a containerised driver can live under another root)
driver-root = "/"
dev-root = "/"
# CDI spec directories; `gpunode cdi generate --install` writes nvidia.yaml into the first
cdi-spec-dirs = ["/etc/cdi", "/var/run/cdi"]
# request gates (NVIDIA's semantics)
accept-envvar-unprivileged = true
accept-volume-mounts = false
annotation-prefixes = ["cdi.k8s.io/"]
default-capabilities = ["compute", "utility"]
supported-capabilities = ["compat32", "compute", "display", "graphics", "ngx", "utility", "video"]
disable-require = false
# the hook program the runtime puts into specs, and the inventory cache it reads
hook-path = "/usr/local/bin/gpunode-hook"
cache-file = "/var/cache/gpunode/inventory.json"
```

``ldconfig`` (a string) is deprecated and ignored: it named the host ldconfig the hook
ran, confined, in each GPU container; the hook now writes the container's ld.so.cache
itself (gpunode.hook.ldcache) and runs no program. The key is still accepted, because a
runtime.toml written for an earlier gpunode (the gpu_container_runtime role renders any
key of its settings) must not stop every GPU container on upgrade; an error would buy
nothing, since no value of it could change what a container gets.

With a ``driver-root`` other than ``/`` the driver's files, NVML and /proc/driver/nvidia are
looked up under it (see gpunode.runtime.discovery); device nodes come from ``dev-root``.
"""

from __future__ import annotations

import os

from ..nvidia.capabilities import ALL_CAPABILITIES
from ..util.record import factory, fields, record

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

DEFAULT_PATH = "/etc/gpunode/runtime.toml"  # a str: pathlib costs ~3 ms per container start
# The config file's parsed content, kept with its text (see _parse): importing tomllib
# alone costs every GPU container start 5-20 ms on a node with a runtime.toml. One entry,
# whatever the file's path; $GPUNODE_RUNTIME_CONFIG_CACHE moves it ("" turns it off).
PARSED_CACHE = "/run/gpunode/runtime-toml.json"
LOG_LEVELS = ("debug", "info", "warning", "error")
# What the sh first stage (gpunode.launch.firststage.dispatcher) needs to know of runtime.toml, in
# lines its builtins read: the runtimes entries and the spec markers the annotation
# prefixes add. $GPUNODE_RUNTIME_FIRST_STAGE moves it ("" turns it off). See first_stage().
FIRST_STAGE = "/run/gpunode/first-stage"
FIRST_STAGE_HEADER = "gpunode-first-stage 1"
# The only mode the first-stage file may have (checked by both stages): writable by its
# owner alone, since its `runtime` lines pick what every runtime call execs as root.
FIRST_STAGE_MODE = 0o644
# An annotation prefix made of these characters appears verbatim in config.json (no JSON
# writer escapes them); any other prefix makes every spec with annotations a candidate.
_PLAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:+=@~")


# What a Kubernetes node's runtime.toml says unless its operator opts out (`gpunode runtime
# setup --kubernetes`, the gpu_container_runtime role with gpunode registered with
# containerd): NVIDIA's GPU Operator's settings. Any pod may name the RuntimeClass, and its
# env (or its image's: CUDA base images carry NVIDIA_VISIBLE_DEVICES=all) would otherwise
# take every GPU of the node; so an unprivileged container gets GPUs only through what the
# device plugin allocated (volume mounts, CDI). The defaults of the dataclass below stay
# NVIDIA's own (true, false): a Docker-only node keeps `docker run -e
# NVIDIA_VISIBLE_DEVICES=…`. README "Kubernetes nodes", Security.
KUBERNETES_SETTINGS = (("accept-envvar-unprivileged", False), ("accept-volume-mounts", True))
# The key whose `true` on a Kubernetes node needs the explicit opt-in (--kubernetes-insecure-envvar,
# gpu_container_runtime_kubernetes_insecure_envvar).
INSECURE_KEY = "accept-envvar-unprivileged"


class ConfigError(ValueError):
    """Invalid configuration; the message is one line."""


@record
class RuntimeConfig:
    runtimes: list[str] = factory(lambda: ["runc", "crun"])
    log_file: str = "/var/log/gpunode-runtime.log"
    log_level: str = "info"
    driver_root: str = "/"
    dev_root: str = "/"
    cdi_spec_dirs: list[str] = factory(lambda: ["/etc/cdi", "/var/run/cdi"])
    accept_envvar_unprivileged: bool = True
    accept_volume_mounts: bool = False
    annotation_prefixes: list[str] = factory(lambda: ["cdi.k8s.io/"])
    default_capabilities: list[str] = factory(lambda: ["compute", "utility"])
    supported_capabilities: list[str] = factory(lambda: list(ALL_CAPABILITIES))
    disable_require: bool = False
    hook_path: str = "/usr/local/bin/gpunode-hook"
    cache_file: str = "/var/cache/gpunode/inventory.json"
    ldconfig: str = ""  # deprecated, ignored (see the module docstring)
    source: str = "<defaults>"

    def validate(self) -> RuntimeConfig:
        where = self.source
        if not self.cdi_spec_dirs or not all(os.path.isabs(d) for d in self.cdi_spec_dirs):
            raise ConfigError(
                f"{where}: cdi-spec-dirs {self.cdi_spec_dirs!r} must list absolute directories"
            )
        if not self.runtimes:
            raise ConfigError(f'{where}: runtimes is empty; list at least one (e.g. ["runc"])')
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"{where}: log-level {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        for key in ("default_capabilities", "supported_capabilities"):
            for cap in getattr(self, key):
                if cap not in ALL_CAPABILITIES:
                    raise ConfigError(
                        f"{where}: {key.replace('_', '-')} has {cap!r}; accepted: "
                        f"{', '.join(ALL_CAPABILITIES)}"
                    )
        for key in ("driver_root", "dev_root", "hook_path"):
            if not os.path.isabs(getattr(self, key)):
                raise ConfigError(
                    f"{where}: {key.replace('_', '-')} {getattr(self, key)!r} must be an absolute path"
                )
        return self


_TYPES = set(fields(RuntimeConfig))


def _check(where: str, key: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} = {value!r} is not valid; expected true or false")
    elif isinstance(default, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{where}: {key} = {value!r} is not valid; expected a list of strings"
            )
    elif isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{where}: {key} = {value!r} is not valid; expected a string")
    return value


def _parse(path: str, raw: bytes, cache: str | None) -> dict[str, Any]:
    """The TOML document ``raw``: from ``cache`` when it holds this very text (a JSON file
    of ours: {"toml": text, "data": parsed}, owned by us and not writable by others),
    else parsed with tomllib and cached there (best effort). Every check of the values
    runs on the result either way."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if cache:
        data = _cached(cache, text)
        if data is not None:
            return data
    import tomllib  # only on a cache miss (see PARSED_CACHE)

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if cache:
        _store(cache, text, data)
    return data


def _cached(cache: str, text: str) -> dict[str, Any] | None:
    from ..util import fastjson
    from ..util.files import read_owned

    raw = read_owned(cache, 1 << 20)
    if raw is None:
        return None
    try:
        entry = fastjson.loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(entry, dict) and entry.get("toml") == text:
        data = entry.get("data")
        return data if isinstance(data, dict) else None
    return None


def _store(cache: str, text: str, data: dict[str, Any]) -> None:
    from ..util import fastjson
    from ..util.files import private_dir, write_atomic

    try:
        body = fastjson.dumps({"toml": text, "data": data}).encode()
    except (TypeError, ValueError):  # TOML dates and the like: nothing a key accepts
        return
    if not private_dir(os.path.dirname(cache) or "."):
        return
    try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
        write_atomic(cache, body, 0o644, skip_if_same=False)
    except OSError:  # read-only /run, not root: correct, only slower
        pass


def config_path(path: os.PathLike | str | None = None) -> str:
    """The runtime.toml meant: ``path``, else $GPUNODE_RUNTIME_CONFIG, else DEFAULT_PATH."""
    return os.fspath(path or os.environ.get("GPUNODE_RUNTIME_CONFIG", DEFAULT_PATH))


def load(
    path: os.PathLike | str | None = None,
    *,
    first_stage_force: bool = False,
    write_caches: bool = True,
) -> RuntimeConfig:
    """Load the config file; a missing file (at the default path) means defaults.
    `first_stage_force`: rewrite the sh first stage's file even when fresh (see
    first_stage). `write_caches=False`: neither the parsed-content cache nor the first
    stage's file is read or written (a dry run writes nothing)."""
    explicit = path is not None or "GPUNODE_RUNTIME_CONFIG" in os.environ
    path = config_path(path)
    cfg = RuntimeConfig(source=path)
    try:
        with open(path, "rb") as fh:
            read_stat = os.fstat(fh.fileno())
            raw = fh.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"config file {path} does not exist") from None
        cfg.source = "<defaults>"
        return cfg
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    cache = os.environ.get("GPUNODE_RUNTIME_CONFIG_CACHE", PARSED_CACHE) if write_caches else None
    _apply(cfg, _parse(path, raw, cache))
    if write_caches:
        first_stage(cfg, read_stat, first_stage_force)
    return cfg


def from_text(raw: bytes, source: str) -> RuntimeConfig:
    """The configuration a runtime.toml holding ``raw`` would give, checked as `load` checks
    a file (errors name ``source``); reads and writes nothing. For a candidate file before
    it replaces the old one."""
    cfg = RuntimeConfig(source=source)
    _apply(cfg, _parse(source, raw, None))
    return cfg


def _apply(cfg: RuntimeConfig, data: dict[str, Any]) -> None:
    """Set ``data``'s keys on ``cfg`` (named by ``cfg.source`` in errors) and validate it."""
    path = cfg.source
    defaults = RuntimeConfig()
    accepted = sorted(k.replace("_", "-") for k in _TYPES if k != "source")
    for key, value in data.items():
        attr = key.replace("-", "_")
        if attr not in _TYPES or attr == "source":
            raise ConfigError(f"{path}: unknown key {key!r}; accepted keys: {', '.join(accepted)}")
        setattr(cfg, attr, _check(path, key, value, getattr(defaults, attr)))
    cfg.validate()


def first_stage_markers(prefixes: list[str]) -> list[str]:
    """Strings, beyond gpunode.runtime.REQUEST_MARKERS, whose absence from a
    config.json proves that none of its annotation keys starts with one of `prefixes`."""
    from . import REQUEST_MARKERS

    markers = [m.decode() for m in REQUEST_MARKERS]
    extra: list[str] = []
    for prefix in prefixes:
        if any(m in prefix for m in markers + extra):
            continue  # every key with this prefix contains that marker already
        marker = prefix if prefix and set(prefix) <= _PLAIN_CHARS else '"annotations"'
        if marker not in extra:
            extra.append(marker)
    return extra


def first_stage_lines(runtimes: list[str], prefixes: list[str]) -> list[str]:
    """The lines of the first stage's file after its header and config line."""
    lines = [f"runtime {r}" for r in runtimes]
    lines += [f"marker {m}" for m in first_stage_markers(prefixes)]
    lines.append("end")
    return lines


def first_stage_body(runtimes: list[str], prefixes: list[str]) -> str:
    return "".join(f"{line}\n" for line in first_stage_lines(runtimes, prefixes))


def first_stage_text(cfg: RuntimeConfig) -> str | None:
    """The first stage's file for `cfg` (None when a value cannot be written as a line)."""
    lines = [FIRST_STAGE_HEADER, f"config {cfg.source}"]
    lines += first_stage_lines(cfg.runtimes, cfg.annotation_prefixes)
    if any("\n" in line or "\r" in line for line in lines):
        return None
    return "\n".join(lines) + "\n"


def _first_stage_trusted(st: os.stat_result) -> bool:
    """Whether the sh stage would trust a first-stage file of this fstat: a regular file
    of exactly FIRST_STAGE_MODE, owned by this user. Anything else is rewritten."""
    return (
        (st.st_mode & 0o170000) == 0o100000
        and st.st_mode & 0o7777 == FIRST_STAGE_MODE
        and st.st_uid == os.geteuid()
    )


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def first_stage(cfg: RuntimeConfig, read_stat: os.stat_result, force: bool = False) -> None:
    """Write FIRST_STAGE for `cfg`, read from a file whose fstat was `read_stat`, when it is
    missing, stale or different (always with `force`). If runtime.toml is no longer that
    file once it is written, the new file is removed again: it must never be newer than a
    runtime.toml it does not describe.

    Only for the config the runtime itself reads ($GPUNODE_RUNTIME_CONFIG or DEFAULT_PATH),
    not a symlink. The sh stage trusts the file only while it is a regular file of its own
    user, not a symlink, and newer (``-nt``) than runtime.toml and than runtime.toml's
    directory (a rename into it, e.g. `mv` of an older file, changes the directory's
    mtime). dash compares nanoseconds; a shell comparing seconds sees a file written in
    runtime.toml's second as stale, so here "fresh" means a later second, and a file that
    is not is written again on each Python load. Best effort: no error when it cannot be
    written (not root, read-only /run): the sh stage then hands every call to Python."""
    side = os.environ.get("GPUNODE_RUNTIME_FIRST_STAGE", FIRST_STAGE)
    path = cfg.source
    if not side or path != config_path():
        return
    text = first_stage_text(cfg)
    try:
        conf = os.lstat(path)
        confdir = os.stat(os.path.dirname(path) or ".")
    except OSError:
        return
    if text is None or _identity(conf) != _identity(read_stat):  # a symlink, or replaced
        return
    if not force:
        try:
            fd = os.open(side, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                st = os.fstat(fd)
                same = os.read(fd, 1 << 16) == text.encode()
            finally:
                os.close(fd)
            newest = max(int(conf.st_mtime), int(confdir.st_mtime))
            if same and _first_stage_trusted(st) and int(st.st_mtime) > newest:
                return
        except OSError:
            pass
    from ..util.files import private_dir, write_atomic

    if not private_dir(os.path.dirname(side) or "."):
        return  # a directory others could write: no file the sh stage would trust
    try:
        write_atomic(side, text.encode(), FIRST_STAGE_MODE, skip_if_same=False)
        if _identity(os.lstat(path)) != _identity(read_stat):
            os.unlink(side)  # runtime.toml changed meanwhile
    except OSError:
        pass
