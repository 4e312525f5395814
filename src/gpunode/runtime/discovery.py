"""Discovery: which GPUs and which driver files this node has.

Two layers, as in NVIDIA's toolkit (discover → edits):

* ``NodeFacts`` (driver version, CUDA version, GPUs) come from NVML — slow to initialise,
  so they are kept in the **inventory cache** (``cache-file`` in runtime.toml, default
  ``/var/cache/gpunode/inventory.json``) together with the driver's file list.
* The cache is keyed on what changes when the driver changes (gpunode.runtime.driverkey):
  the driver root, the version in ``/proc/driver/nvidia/version`` and the identity
  (device, inode, mtime, size) of ``libnvidia-ml.so.1`` and of ``/etc/ld.so.cache``.
  When any differs, or the
  cache cannot be decoded (corrupt, truncated, another schema) or trusted (not a regular
  file of the runtime's user, writable by group or others, in a directory others can
  write), the runtime rediscovers and rewrites the cache (atomically, into a directory
  created 0755 and written only while no one else can write it). ``gpunode cdi generate`` and
  ``gpunode runtime refresh`` (run at install and at boot by the runtime role) refresh it
  explicitly. Device nodes are *not* cached: they are stat'ed for every container, so a
  missing ``/dev/nvidia<minor>`` is noticed at once.

A ``driver-root`` other than ``/`` (a containerised driver, e.g. ``/run/nvidia/driver``):
NVML, the ld cache, libraries, binaries, firmware, IPC sockets and
``/proc/driver/nvidia`` are all looked up under it (symlinks resolved inside it), and the
host paths recorded keep it; containers see them at the paths without it.
"""

from __future__ import annotations

import os

from ..nvidia.capabilities import BINARIES, IPC, LIBRARIES, expand_capabilities
from ..nvidia.devices import under
from ..nvidia.facts import NodeFacts
from ..util.record import asdict, factory, fields, record
from .driverkey import NVML_DIRS, cache_key

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

CACHE_SCHEMA = 6  # 6: GPUs carry mig_enabled and their MIG devices

BIN_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin")


class DiscoveryError(RuntimeError):
    """The driver cannot be discovered (no NVML, no driver). One-line message."""


@record
class DriverFiles:
    """Host paths (absolute) of the driver's userspace files, all under `root`."""

    libraries: dict[str, list[str]] = factory(dict)  # capability -> paths
    binaries: dict[str, list[str]] = factory(dict)
    firmware: list[str] = factory(list)
    ipc: dict[str, list[str]] = factory(dict)
    root: str = "/"  # the driver root

    def container_path(self, host_path: str) -> str:
        """Where a file under the driver root is in a container: the root stripped."""
        if self.root in ("", "/"):
            return host_path
        return "/" + os.path.relpath(host_path, self.root)

    sonames: dict[str, str] = factory(dict)  # library path -> DT_SONAME, where it differs

    def for_capabilities(self, caps: set[str]) -> tuple[list[str], list[str], list[str]]:
        caps = expand_capabilities(caps)
        libs = [p for c in sorted(caps) for p in self.libraries.get(c, [])]
        bins = [p for c in sorted(caps) for p in self.binaries.get(c, [])]
        ipc = [p for c in sorted(caps) for p in self.ipc.get(c, [])]
        return libs, bins, ipc


@record
class Discovery:
    node: NodeFacts
    files: DriverFiles
    key: dict[str, Any]
    from_cache: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": CACHE_SCHEMA,
            "key": self.key,
            "node": self.node.to_dict(),
            "files": asdict(self.files),
        }


def _real(driver_root: str, path: str) -> str | None:
    """The host path of `path` (as the driver sees it) with every symlink resolved inside
    the driver root, as the driver's own processes would resolve it; None if missing."""
    if driver_root in ("", "/"):
        return os.path.realpath(path) if os.path.exists(path) else None
    from ..util.safepath import open_in_root, proc_fd_path

    try:
        root_fd = os.open(driver_root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = open_in_root(root_fd, path, follow_last=True)
    except OSError:
        return None
    finally:
        os.close(root_fd)
    try:
        return os.readlink(proc_fd_path(fd))
    finally:
        os.close(fd)


def ldcache_libraries(driver_root: str = "/") -> list[str]:
    """Library paths listed in the driver root's ld.so.cache (64-bit entries), as the
    driver sees them (without the driver root)."""
    cache = under(driver_root, "/etc/ld.so.cache")
    ldconfig = next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), "ldconfig"
    )
    from ..util import tool  # only for a fresh discovery, never on the cached path

    proc = tool.run([ldconfig, "-p", "-C", cache], env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    out = []
    for line in proc.stdout.splitlines()[1:]:
        if "=>" not in line or ("x86-64" not in line and "64bit" not in line):
            continue
        out.append(line.rsplit("=>", 1)[1].strip())
    return out


def library_sonames(paths: list[str]) -> dict[str, str]:
    """DT_SONAME of each library whose SONAME differs from its file name. The hook makes
    these links in the container and its ld.so.cache entries under these names."""
    from ..util import elf

    out = {}
    for path in paths:
        try:
            name = elf.soname(path)
        except (OSError, elf.ElfError):
            continue
        if name and name != os.path.basename(path):
            out[path] = name
    return out


def discover_files(driver_version: str, driver_root: str = "/") -> DriverFiles:
    files = DriverFiles(root=driver_root)
    suffix = f".so.{driver_version}"
    seen: set[str] = set()
    candidates = []
    for path in ldcache_libraries(driver_root):
        real = _real(driver_root, path)
        if real is not None and real.endswith(suffix) and real not in seen:
            seen.add(real)
            candidates.append(real)
    for cap, prefixes in LIBRARIES.items():
        found = sorted(
            p
            for p in candidates
            if any(os.path.basename(p) == f"{pre}{suffix}" for pre in prefixes)
        )
        if found:
            files.libraries[cap] = found
            files.sonames.update(library_sonames(found))
    for cap, names in BINARIES.items():
        found = []
        for name in names:
            for d in BIN_DIRS:
                real = _real(driver_root, f"{d}/{name}")
                if real is not None and os.path.isfile(real) and os.access(real, os.X_OK):
                    # the name is the mount's destination: keep the link when it differs
                    keep = os.path.basename(real) == name
                    found.append(real if keep else under(driver_root, f"{d}/{name}"))
                    break
        if found:
            files.binaries[cap] = found
    fw = under(driver_root, f"/lib/firmware/nvidia/{driver_version}")
    try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
        files.firmware = sorted(
            os.path.join(fw, n)
            for n in os.listdir(fw)
            if n.startswith("gsp") and n.endswith(".bin")
        )
    except OSError:
        pass
    for cap, paths in IPC.items():
        found = [under(driver_root, p) for p in paths if os.path.exists(under(driver_root, p))]
        if found:
            files.ipc[cap] = found
    return files


def nvml_facts(driver_root: str = "/") -> NodeFacts:
    """The node's facts from NVML: the driver root's own NVML for a containerised driver."""
    from ..nvidia import nvml  # only for a fresh discovery, never on the cached path

    library = None
    if driver_root not in ("", "/"):
        library = nvml_library(driver_root)
        if library is None:
            raise DiscoveryError(f"no libnvidia-ml.so.1 under the driver root {driver_root}")
    try:
        with nvml.Session(library) as nv:
            driver, cuda = nvml.system(nv)
            # a lost GPU (no handle) cannot be given to a container
            gpus = tuple(nvml.gpu_facts(nv, i, h) for i, h, _ in nvml.handles(nv) if h is not None)
    except nvml.NvmlError as exc:
        raise DiscoveryError(str(exc)) from None
    return NodeFacts(driver_version=driver, cuda_version=cuda, gpus=gpus)


def nvml_library(driver_root: str = "/") -> str | None:
    """The host path of the driver root's libnvidia-ml.so.1 (its target), or None."""
    for d in NVML_DIRS:
        real = _real(driver_root, f"{d}/libnvidia-ml.so.1")
        if real is not None:
            return real
    return None


def discover(driver_root: str = "/", key: dict[str, Any] | None = None) -> Discovery:
    """Fresh discovery through NVML. `key`: the cache key, when the caller has it already."""
    key = cache_key(driver_root) if key is None else key
    node = nvml_facts(driver_root)
    return Discovery(node, discover_files(node.driver_version, driver_root), key)


# The cache decides which host paths are mounted into every GPU container: it is read
# only as a file nobody but the runtime's user could have written (util.files.read_owned)
# and written only into a directory of that user that nobody else can write.
MAX_CACHE_BYTES = 4 << 20


def write_cache(d: Discovery, path: str) -> bool:
    """Write the cache (0644) into its directory, created 0755 when missing; False, and
    nothing written, when that directory is not the runtime user's alone."""
    import json  # sorted and indented: only on a fresh discovery

    from ..util.files import private_dir, write_atomic

    if not private_dir(os.path.dirname(path) or "."):
        return False
    write_atomic(path, json.dumps(d.to_dict(), indent=1, sort_keys=True).encode(), 0o644)
    return True


def read_cache(path: str) -> dict[str, Any] | None:
    from ..util import fastjson
    from ..util.files import read_owned

    raw = read_owned(path, MAX_CACHE_BYTES)
    if raw is None:
        return None
    try:
        data = fastjson.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == CACHE_SCHEMA else None


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of strings")
    return value


# DriverFiles fields that map a string to a string (the others map to lists of strings).
_STRING_MAPS = frozenset({"sonames"})


def _checked(name: str, value: Any, default: Any) -> Any:
    """`value` if it has the JSON shape of the DriverFiles field `name` (default `default`)."""
    if isinstance(default, dict):
        if not isinstance(value, dict):
            raise TypeError("expected an object")
        for v in value.values():
            if name in _STRING_MAPS:
                if not isinstance(v, str):
                    raise TypeError("expected a string")
            else:
                _strings(v)
        return value
    if isinstance(default, list):
        return _strings(value)
    if type(value) is not type(default):
        raise TypeError(f"expected {type(default).__name__}")
    return value


def decode_cache(data: dict[str, Any], key: dict[str, Any]) -> Discovery:
    """The Discovery in a cache file's data. Anything malformed (missing or extra fields,
    wrong types, an unparsable bus id) raises KeyError, TypeError or ValueError: the
    runtime must never fail a container on what is only a cache."""
    defaults = DriverFiles()
    raw = data["files"]
    if not isinstance(raw, dict) or set(raw) != set(fields(DriverFiles)):
        raise KeyError("files: wrong fields")
    files = DriverFiles(**{n: _checked(n, raw[n], getattr(defaults, n)) for n in raw})
    return Discovery(NodeFacts.from_dict(data["node"]), files, key, from_cache=True)


def load(
    cache_file: str, driver_root: str = "/", refresh: bool = False, store: bool = True
) -> Discovery:
    """The node's discovery: from the cache when still valid, else fresh (and cached, unless
    ``store`` is false: a dry run writes nothing).

    A cache that cannot be decoded counts as a miss: it is rediscovered and rewritten."""
    key = cache_key(driver_root)
    if not refresh:
        data = read_cache(cache_file)
        if data is not None and data.get("key") == key:
            try:
                return decode_cache(data, key)
            except (KeyError, TypeError, ValueError, AttributeError):
                pass
    d = discover(driver_root, key=key)
    if not store:
        return d
    try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
        write_cache(d, cache_file)
    except OSError:  # read-only /var/cache: correct, only slower next time
        pass
    return d
