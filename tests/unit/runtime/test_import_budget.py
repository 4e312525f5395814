"""The container start path's import budget (runtime create, hook configure).

Each entry a container start runs is started as the launchers start it (a fresh
``python -IS``), and the modules it imports beyond the interpreter's own start-up must be
exactly those listed here. Every module costs start-up time on each ``docker run``;
dataclasses, typing, argparse, pathlib, yaml and pynvml cost milliseconds each and must
never appear, nor ``re`` and ``json`` (config.json and the cache go through
gpunode.util.fastjson). A new import fails naming
the module: remove it, import it lazily, or (if it is worth its cost) add it here.

The standard-library lists were measured on CPython 3.11 (the interpreter scripts/setup
installs); another version's internals differ and need a new measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.nvidia.facts import GpuFacts, NodeFacts
from gpunode.runtime import config, discovery

SRC = Path(__file__).resolve().parents[3] / "src"
FORBIDDEN = {"dataclasses", "typing", "argparse", "pathlib", "yaml", "pynvml"}

# What the hook's `configure` imports (the CDI path runs it as a hook; the runtime's GPU
# path calls its functions in-process). No contextlib, collections or functools: ~1-2 ms;
# no ctypes package (its __init__ is ~4 ms): _ctypes through gpunode.util.cabi.
HOOK_CONFIGURE = {
    "__future__",
    "_ctypes",
    "_struct",
    "errno",
    "struct",
} | {
    "gpunode",
    "gpunode.hook",
    "gpunode.hook.args",
    "gpunode.hook.configure",
    "gpunode.hook.errors",
    "gpunode.hook.fileops",
    "gpunode.hook.ldcache",
    "gpunode.hook.linux",
    "gpunode.hook.main",
    "gpunode.hook.procdriver",
    "gpunode.hook.state",
    "gpunode.hook.symlinks",
    "gpunode.nvidia",
    "gpunode.nvidia.busid",
    "gpunode.nvidia.devices",
    "gpunode.nvidia.procfs",
    "gpunode.util",
    "gpunode.util.cabi",  # _ctypes' types and libc functions, without ctypes/__init__.py
    "gpunode.util.ldsocache",  # the ld.so.cache writer (struct only)
    "gpunode.util.record",
    "gpunode.util.safepath",
}

# What of HOOK_CONFIGURE the runtime imports before it starts runc's create (for the spec's
# edits); the rest, the hook's own modules included, is imported while runc runs.
BEFORE_SPAWN = {
    "__future__",
    "errno",
    "gpunode",
    "gpunode.nvidia",
    "gpunode.nvidia.busid",
    "gpunode.nvidia.devices",
    "gpunode.nvidia.procfs",
    "gpunode.util",
    "gpunode.util.record",
    "gpunode.util.safepath",  # the image's /etc/debian_version, resolved in its root (no ctypes)
}

# What every GPU create loads of the start path's processes (gpunode.launch) and the spec's
# entry point, prepared or not
GPU_CREATE = {
    "gpunode.launch",
    "gpunode.launch.shim",
    "gpunode.launch.process",
    "gpunode.launch.protocol",
    "gpunode.launch.transport",
    "gpunode.runtime.bundle",
}

ALLOWED = {
    # create without a GPU request: straight to execve, nothing but the shim and its
    # process primitives
    "runtime, no GPU request": {"gpunode", "gpunode.runtime", "gpunode.launch",
                                "gpunode.launch.shim", "gpunode.launch.process"},
    # create with one: request, cached discovery, edits, config.json rewritten, and the
    # hook's work done in-process (no hook process)
    "runtime, GPU request": HOOK_CONFIGURE
    | GPU_CREATE
    | {"__future__", "_json"}
    | {
        "gpunode",
        "gpunode.nvidia",
        "gpunode.nvidia.busid",
        "gpunode.nvidia.capabilities",
        "gpunode.nvidia.devices",
        "gpunode.nvidia.facts",
        "gpunode.nvidia.procfs",
        "gpunode.runtime",
        "gpunode.runtime.config",
        "gpunode.runtime.discovery",
        "gpunode.runtime.edits",
        "gpunode.runtime.oci",
        "gpunode.runtime.plan",
        "gpunode.runtime.request",
        "gpunode.runtime.requirements",
        "gpunode.runtime.selection",
        "gpunode.runtime.userinput",
        "gpunode.runtime.driverkey",
        "gpunode.runtime.prepared",
        "gpunode.runtime.specinputs",
        "gpunode.util",
        "gpunode.util.fastjson",
        "gpunode.util.files",
        "gpunode.util.record",
        "gpunode.util.versions",  # NVIDIA_REQUIRE_* comparisons (builtins only)
    },
    # the same request again on the unchanged node: served from the prepared edits, without
    # the request parser, discovery, the edits builder or the node facts
    "runtime, prepared GPU request": HOOK_CONFIGURE
    | GPU_CREATE
    | {"__future__", "_json"}
    | {
        "gpunode",
        "gpunode.nvidia",
        "gpunode.nvidia.capabilities",
        "gpunode.nvidia.devices",
        "gpunode.nvidia.procfs",
        "gpunode.runtime",
        "gpunode.runtime.config",
        "gpunode.runtime.driverkey",
        "gpunode.runtime.oci",
        "gpunode.runtime.prepared",
        "gpunode.runtime.specinputs",
        "gpunode.util",
        "gpunode.util.fastjson",
        "gpunode.util.files",
        "gpunode.util.record",
    },
    # the hook as the runtime calls it (--root given: no OCI state, no json)
    "hook configure": HOOK_CONFIGURE,
    # the hook as a CDI spec's createContainer hook (containerd's or podman's CDI: the OCI
    # state on stdin, config.json read for the root): JSON through fastjson, never json
    "hook configure, OCI state": HOOK_CONFIGURE | {"_json", "gpunode.util.fastjson"},
    # NVIDIA's hook command line (the nvidia-cdi-hook launcher): the same modules, plus its
    # table and enable-cuda-compat's
    "nvidia-cdi-hook": HOOK_CONFIGURE | {"gpunode.hook.nvcli", "gpunode.hook.cudacompat"},
}
# its two hooks off NVIDIA's default specs, each imported only when called
ALLOWED["nvidia-cdi-hook chmod"] = ALLOWED["nvidia-cdi-hook"] | {"gpunode.hook.chmod"}
ALLOWED["nvidia-cdi-hook create-soname-symlinks"] = ALLOWED["nvidia-cdi-hook"] | {
    "gpunode.hook.sonamelinks",
    "gpunode.util.elf",  # struct only
}

HARNESS = """
import os, sys
base = set(sys.modules)
sys.path[:0] = [{src!r}]
spawned = []

def modules():
    return "\\n".join(sorted(set(sys.modules) - base))

real_exit = os._exit

def report(*args):
    os.write(1, modules().encode())
    if spawned:
        os.write(2, spawned[0].encode())
    real_exit(0)

def spawn(*args, **kwargs):  # a low-level runtime that exits 0 at once (and no container)
    if not spawned:
        spawned.append(modules())
    pid = os.fork()
    if pid == 0:
        real_exit(0)
    return pid

os.execve = report  # where the runtime hands over to runc (no GPU request)
os.posix_spawn = spawn  # where it starts runc's create (GPU request), and its delete
os._exit = report  # where a GPU create ends
{setup}
from {module} import main
try:
    main({argv!r})
except SystemExit:
    pass
report()
"""


def imported(
    module: str, argv: list[str], setup: str = "", spawned=None, stdin: str = ""
) -> set[str]:
    """Modules an entry imports in a fresh `python -IS`, as the launchers run it (and,
    in `spawned`, those it had imported when it started the low-level runtime)."""
    code = HARNESS.format(src=str(SRC), module=module, argv=argv, setup=setup)
    proc = subprocess.run(
        [sys.executable, "-IS", "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "GPUNODE_PREPARED_CACHE": os.environ["GPUNODE_PREPARED_CACHE"],
        },
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    if spawned is not None:
        spawned.update(proc.stderr.split())
    return set(proc.stdout.split())


def check(entry: str, modules: set[str], forbidden: set[str] = FORBIDDEN) -> None:
    bad = sorted(modules & forbidden)
    assert not bad, f"{entry}: imports {', '.join(bad)}, which the start path must never import"
    new = sorted(modules - ALLOWED[entry])
    assert not new, f"{entry}: imports {', '.join(new)}, beyond its allow-list (see this test)"


@pytest.fixture
def bundle(tmp_path):
    b = tmp_path / "bundle"
    (b / "rootfs" / "etc").mkdir(parents=True)
    (b / "rootfs" / "etc" / "debian_version").write_text("12\n")
    return b


def test_runtime_create_without_gpu_request(bundle):
    spec = {"process": {"env": ["PATH=/bin"], "args": ["true"]}, "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    modules = imported("gpunode.launch.shim", ["rt", "create", "--bundle", str(bundle), "x"])
    check("runtime, no GPU request", modules, FORBIDDEN | {"re", "json"})


@pytest.mark.parametrize("toml", [False, True])
def test_runtime_create_with_gpu_request(bundle, tmp_path, monkeypatch, toml):
    """A node with a valid inventory cache, without a runtime.toml or with one whose parsed
    form is cached (then tomllib is not imported). The device nodes are links to /dev/null
    (a character device: enough for the imports, and no mknod needed)."""
    dev = tmp_path / "devroot" / "dev"
    dev.mkdir(parents=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0"):
        (dev / name).symlink_to("/dev/null")
    driver = tmp_path / "driver"
    (driver / "proc/driver/nvidia").mkdir(parents=True)
    (driver / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Thu Jan  1 2026\n"
    )
    gpu = GpuFacts(0, 0, "GPU-00000000-0000-4000-8000-000000000000", "00000000:07:00.0")
    lib = f"{driver}/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"
    files = discovery.DriverFiles(root=str(driver), libraries={"compute": [lib]})
    cache = tmp_path / "inventory.json"
    key = discovery.cache_key(str(driver))
    discovery.write_cache(
        discovery.Discovery(NodeFacts("535.261.03", "12.2", (gpu,)), files, key), str(cache)
    )
    spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    values = {"cache_file": str(cache), "driver_root": str(driver), "dev_root": str(dev.parent)}
    if toml:  # at the default path, parsed once here (which fills the cache)
        conf, parsed = tmp_path / "runtime.toml", tmp_path / "runtime-toml.json"
        conf.write_text("".join(f'{k.replace("_", "-")} = "{v}"\n' for k, v in values.items()))
        with open(conf, "a") as fh:
            fh.write('log-file = ""\n')
        monkeypatch.setattr(config, "DEFAULT_PATH", str(conf))
        monkeypatch.setattr(config, "PARSED_CACHE", str(parsed))
        monkeypatch.delenv("GPUNODE_RUNTIME_CONFIG_CACHE")
        config.load()
        setup = (
            "from gpunode.runtime import config\n"
            f"config.DEFAULT_PATH, config.PARSED_CACHE = {str(conf)!r}, {str(parsed)!r}\n"
            f"config.FIRST_STAGE = {str(tmp_path / 'first-stage')!r}\n"
        )
    else:  # runtime.toml's values without a runtime.toml
        setup = (
            "from gpunode.runtime import config\n"
            f"config.load = lambda path=None: config.RuntimeConfig(log_file='', **{values!r})\n"
        )
    spawned: set[str] = set()
    modules = imported(
        "gpunode.launch.shim", ["rt", "create", "--bundle", str(bundle), "x"], setup, spawned
    )
    # the hook's work (ctypes, the ld cache, the mount API) is imported while runc's
    # create runs, not before it starts
    assert spawned, "the runtime's create was not started"
    early = sorted(spawned & (HOOK_CONFIGURE - BEFORE_SPAWN))
    assert not early, f"imported before runc's create starts: {', '.join(early)}"
    edited = json.loads((bundle / "config.json").read_text())
    assert "hooks" not in edited
    assert lib in [m["source"] for m in edited["mounts"]]
    check("runtime, GPU request", modules, FORBIDDEN | {"re", "json", "tomllib"})

    # the same request again: the prepared edits, the same spec
    (bundle / "config.json").write_text(json.dumps(spec))
    spawned.clear()
    modules = imported(
        "gpunode.launch.shim", ["rt", "create", "--bundle", str(bundle), "y"], setup, spawned
    )
    assert json.loads((bundle / "config.json").read_text()) == edited
    assert spawned, "the runtime's create was not started"
    early = sorted(spawned & (HOOK_CONFIGURE - BEFORE_SPAWN))
    assert not early, f"imported before runc's create starts: {', '.join(early)}"
    check("runtime, prepared GPU request", modules, FORBIDDEN | {"re", "json", "tomllib"})


def test_hook_configure(tmp_path):
    """As the runtime's spec runs it: --root, links, the ld cache, and /proc/driver/nvidia of a driver root
    without one (the hook says so and leaves it; every module is imported at load time, so
    the path taken after that does not change the set)."""
    root = tmp_path / "rootfs"
    root.mkdir()
    argv = ["--root", str(root), "configure", "--link", "libcuda.so.1::/usr/lib/libcuda.so"]
    argv += ["--library", "libcuda.so.1::/usr/lib/libcuda.so.1", "--folder", "/usr/lib"]
    argv += ["--proc-driver", "--gpus-selected", "--driver-root", str(tmp_path / "none")]
    modules = imported("gpunode.hook.main", argv)
    assert os.readlink(root / "usr/lib/libcuda.so") == "libcuda.so.1"
    assert (root / "etc/ld.so.cache").read_bytes().startswith(b"glibc-ld.so.cache1.1")
    check("hook configure", modules, FORBIDDEN | {"re", "json"})


def test_hook_configure_from_oci_state(tmp_path):
    """As a CDI spec's hook runs it (containerd's and podman's CDI): no --root, the OCI
    state on stdin and the bundle's config.json read for the root, without json."""
    root = tmp_path / "bundle" / "rootfs"
    root.mkdir(parents=True)
    (root.parent / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "bundle": str(root.parent)})
    argv = ["configure", "--link", "libcuda.so.1::/usr/lib/libcuda.so"]
    argv += ["--library", "libcuda.so.1::/usr/lib/libcuda.so.1", "--folder", "/usr/lib"]
    modules = imported("gpunode.hook.main", argv, stdin=state)
    assert os.readlink(root / "usr/lib/libcuda.so") == "libcuda.so.1"
    assert (root / "etc/ld.so.cache").read_bytes().startswith(b"glibc-ld.so.cache1.1")
    check("hook configure, OCI state", modules, FORBIDDEN | {"re", "json"})


@pytest.mark.parametrize(
    "sub",
    [
        ["update-ldcache", "--folder", "/usr/lib"],
        ["create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so"],
        ["enable-cuda-compat", "--host-driver-version=550.54.15"],
        ["update-application-profile"],
        ["chmod", "--mode", "755", "--path", "/dev/dri"],
        ["create-soname-symlinks", "--folder", "/usr/lib"],
        ["a-hook-from-the-future"],
    ],
    ids=lambda s: s[0],
)
def test_nvidia_cdi_hook(tmp_path, sub):
    """NVIDIA's hook command line, as the nvidia-cdi-hook launcher runs it (one process per
    hook of the plugin's spec: each pays its start-up)."""
    root = tmp_path / "rootfs"
    root.mkdir()
    modules = imported("gpunode.hook.nvcli", ["nvidia-cdi-hook", "--root", str(root), *sub])
    entry = f"nvidia-cdi-hook {sub[0]}"
    check(entry if entry in ALLOWED else "nvidia-cdi-hook", modules, FORBIDDEN | {"re", "json"})
