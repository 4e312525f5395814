"""container.image, container.isolation, container.cuda: containers started through the
real engine and gpunode's runtime see exactly the GPUs they request.

The probe image is built on the node from the node's own files — its python3, the modules
and shared libraries the probe needs, the system libraries the node's libcuda.so.1 links
against (libdl, libpthread, librt, ...: a CUDA image has them; the runtime injects the
driver's libraries, not the C library's), and gpunode.validate.probe — with ``<engine>
import``: no registry, so air-gapped nodes validate too. It is tagged by the hash of its
content, so repeated runs reuse it and a python3 upgrade builds a new one.

Two containers run side by side: one requesting a single GPU (by UUID) and one requesting
all. Each must show exactly the requested GPUs three ways: the ``/dev/nvidia<N>`` nodes,
the UUIDs NVML lists through the injected library, and ``/proc/driver/nvidia/gpus`` (where
the node has one to filter). "All" is every GPU NVML can read (a lost GPU is not given to
containers; a GPU without a device node cannot be). container.cuda: in the same containers,
cuInit and cuDeviceGetCount must give the requested count; when the node reports no
CUDA-capable device (no libcuda.so.1 on the node, or cuInit answers
CUDA_ERROR_NO_DEVICE) it is skipped with that reason.

mig.isolation, one per MIG device of the inventory: two more containers each, requesting
it as ``<gpu>:<n>`` and as its ``MIG-<uuid>``; each must show exactly that MIG device: the
parent's ``/dev/nvidia<minor>`` only, NVML listing the parent and under it that MIG device
alone, the ``/dev/nvidia-caps`` nodes of its GPU and compute instance and no other (their
minors read from the driver's access files, gpunode.nvidia.mig), and the parent's
``/proc/driver/nvidia/gpus`` entry only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..nvidia import inventory
from ..nvidia import mig as migcaps
from ..nvidia.busid import BusId
from ..nvidia.facts import MigFacts
from ..nvidia.gpu import Gpu
from ..nvidia.procfs import PROC_DRIVER_NVIDIA
from ..util import tool
from . import probe
from .expect import Expectations
from .model import FAIL, PASS, SKIP, Check, titled

REPOSITORY = "gpunode-validate-probe"
PROBE_PATH = "/gpunode-probe.py"
RUN_TIMEOUT = 120
CUDA_ERROR_NO_DEVICE = 100
TITLES = {
    "container.image": "Probe image (built on the node)",
    "container.isolation": "Containers see exactly the requested GPUs",
    "container.cuda": "CUDA in a container",
    "mig.isolation": "A container sees exactly the requested MIG device",
}
CONTAINER_CHECKS = ("container.image", "container.isolation", "container.cuda")
MIG_WORKERS = 8  # containers at once for the MIG devices

# What the probe imports, found by running the node's python3 the way the container does.
_MODULES = (
    "import sys, ctypes, json, os\n"
    "print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values())"
    " if getattr(m, '__file__', None)})))"
)
_LDD = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


class ImageError(RuntimeError):
    """The probe image cannot be built (one line)."""


def _python() -> str:
    exe = shutil.which("python3")
    if exe is None:
        raise ImageError("python3 is not on this node's PATH: the probe image needs it")
    return os.path.realpath(exe)


def _ldd(paths: list[str]) -> set[str]:
    if not paths:
        return set()
    proc = tool.run(["ldd", *paths])
    return set(_LDD.findall(proc.stdout))


def image_files(python: str | None = None) -> dict[str, str]:
    """{path in the image: path on the node} for python3, its modules and libraries."""
    python = python or _python()
    proc = tool.run([python, "-I", "-S", "-c", _MODULES], timeout=60)
    if not proc.ok:
        why = proc.failed or proc.stderr.strip()[-200:]
        raise ImageError(f"{python} cannot import ctypes/json: {why}")
    modules = json.loads(proc.stdout)
    files = {python: python}
    stdlib = next((os.path.dirname(m) for m in modules if m.endswith("/os.py")), None)
    if stdlib is None:
        raise ImageError(f"{python}: cannot find its standard library (os.py)")
    for name in sorted(os.listdir(os.path.join(stdlib, "encodings"))):
        if name.endswith(".py"):
            modules.append(os.path.join(stdlib, "encodings", name))
    for m in modules:
        files[m] = m
        if m.endswith(".py"):
            import importlib.util

            pyc = importlib.util.cache_from_source(m)
            if os.path.exists(pyc):
                files[pyc] = pyc
    libcuda = node_libcuda()
    for lib in _ldd([python, *(m for m in modules if m.endswith(".so"))]) | _ldd(
        [libcuda] if libcuda else []
    ):
        if not re.search(r"/lib(cuda|nvidia)[^/]*$", lib):  # the driver's own: injected
            files[lib] = os.path.realpath(lib)
    return files


def build_tar(files: dict[str, str]) -> bytes:
    """A reproducible tar (sorted, owned by root, mtime 0) of the files and the probe."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(path: str, data: bytes | None, mode: int) -> None:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mtime, info.uid, info.gid = 0, 0, 0
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))

        dirs = {"/etc/ld.so.conf.d", "/tmp", "/dev", "/proc", "/sys"}
        for path in files:
            d = os.path.dirname(path)
            while d not in ("/", ""):
                dirs.add(d)
                d = os.path.dirname(d)
        for d in sorted(dirs):
            add(d, None, 0o1777 if d == "/tmp" else 0o755)
        entries = {p: Path(src).read_bytes() for p, src in files.items()}
        entries["/etc/ld.so.conf"] = b"include /etc/ld.so.conf.d/*.conf\n"
        entries[PROBE_PATH] = Path(probe.__file__).read_bytes()
        for path in sorted(entries):
            src = files.get(path)
            mode = 0o755 if src and os.access(src, os.X_OK) else 0o644
            add(path, entries[path], mode)
    return buf.getvalue()


def ensure_image(engine: str) -> tuple[str, bool]:
    """(tag, True when built now): the probe image, built when no image has its content."""
    files = image_files()
    data = build_tar(files)
    tag = f"{REPOSITORY}:{hashlib.sha256(data).hexdigest()[:16]}"
    have = tool.run([engine, "image", "inspect", tag], timeout=RUN_TIMEOUT)
    if have.ok:
        return tag, False
    proc = tool.run([engine, "import", "-", tag], input=data, timeout=RUN_TIMEOUT)
    if not proc.ok:
        why = proc.failed or proc.stderr.decode(errors="replace").strip()[-200:]
        raise ImageError(f"`{engine} import` failed: {why}")
    return tag, True


# The device plugin's volume-mounts strategy: /dev/null mounted at DEVICE_MOUNT_DIR/<id>.
DEVICE_MOUNT_DIR = "/var/run/nvidia-container-devices"


def request_channel() -> str:
    """How the probe containers ask for GPUs on this node: "volume-mounts" where the node's
    runtime.toml accepts them (a Kubernetes node's does, and there the env of an
    unprivileged container is not read: README "Kubernetes nodes", Security), else "env"
    (NVIDIA_VISIBLE_DEVICES, a Docker node's way)."""
    from ..runtime import config as runtime_config

    try:
        cfg = runtime_config.load(write_caches=False)
    except runtime_config.ConfigError:
        return "env"  # the runtime refuses every GPU container then; the probes will say so
    return "volume-mounts" if cfg.accept_volume_mounts else "env"


def request_args(request: str, channel: str) -> list[str]:
    """``docker``/``podman run`` options asking for ``request`` (ids, comma-separated, or
    all) by ``channel`` (request_channel)."""
    if channel == "volume-mounts":
        args = ["-e", f"NVIDIA_VISIBLE_DEVICES={DEVICE_MOUNT_DIR}"]
        for i in (x for x in request.split(",") if x):  # --mount: a MIG id's ':' is no separator
            args += ["--mount", f"type=bind,source=/dev/null,target={DEVICE_MOUNT_DIR}/{i}"]
        return args
    return ["-e", f"NVIDIA_VISIBLE_DEVICES={request}"]


def run_probe(
    engine: str, runtime: str, image: str, request: str, channel: str = "env"
) -> dict[str, Any]:
    """What a container requesting ``request`` sees; {"error": one line} when it did not run."""
    argv = [engine, "run", "--rm", "--pull", "never", "--network", "none",
            "--runtime", runtime, *request_args(request, channel),
            "-e", "NVIDIA_DRIVER_CAPABILITIES=utility,compute",
            image, os.path.realpath(_python()), "-I", "-S", PROBE_PATH]  # fmt: skip
    proc = tool.run(argv, timeout=RUN_TIMEOUT)
    if proc.timed_out:
        return {"error": f"the container did not finish in {RUN_TIMEOUT}s"}
    if not proc.ok:
        why = proc.failed or tool.last_line(proc.stderr) or "no message"
        return {"error": f"`{engine} run` exited {proc.returncode}: {why}"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": f"the probe printed no JSON: {proc.stdout.strip()[-160:]!r}"}


def compare(request: str, want: list[Gpu], seen: dict[str, Any],
            check_proc: bool) -> list[str]:  # fmt: skip
    """What differs between the requested GPUs and what the container saw (empty: exact).
    MIG: ``all`` gives every MIG device (NVML lists each under its GPU); a GPU requested
    whole gives none of its MIG devices (no GI/CI capability), as NVIDIA's runtime."""
    if "error" in seen:
        return [f"{request}: {seen['error']}"]
    bad = []
    minors = sorted(g.minor for g in want)
    if seen["dev"] != minors:
        bad.append(f"device nodes {seen['dev']}, expected {minors}")
    nv = seen["nvml"]
    uuids = sorted(g.uuid for g in want)
    if "error" in nv:
        bad.append(f"NVML: {nv['error']}")
    else:
        got = sorted(g.get("uuid") or f"<{g.get('error')}>" for g in nv["gpus"])
        if nv["count"] != len(want) or got != uuids:
            bad.append(
                f"NVML lists {nv['count']}: {', '.join(got) or 'none'}; expected {len(want)}"
            )
        by_uuid = {g.uuid: g for g in want}
        for g in nv["gpus"]:
            wanted = by_uuid.get(g.get("uuid"))
            if wanted is None:
                continue
            migs = [m.uuid for m in wanted.mig_devices] if request == "all" else []
            if "mig_error" in g:
                bad.append(f"NVML MIG devices of {wanted.uuid}: {g['mig_error']}")
            elif g.get("mig", []) != migs:
                bad.append(f"NVML lists MIG devices {', '.join(g.get('mig', [])) or 'none'} of "
                           f"{wanted.uuid}; expected {', '.join(migs) or 'none'}")  # fmt: skip
    if check_proc:
        buses = sorted(BusId.parse(g.pci_bus_id).procfs for g in want)
        if seen["proc"] is None:
            bad.append("no /proc/driver/nvidia/gpus in the container")
        elif seen["proc"] != buses:
            bad.append(f"/proc/driver/nvidia/gpus {seen['proc']}, expected {buses}")
    return [f"{request}: " + "; ".join(bad)] if bad else []


def cap_minors(gpu: Gpu, dev: MigFacts,
               proc_nvidia: str = PROC_DRIVER_NVIDIA) -> list[int] | str:  # fmt: skip
    """The minors of the GI and CI cap nodes a container given ``dev`` gets, read from the
    driver's access files; the reason (one line) when they cannot be read."""
    try:
        return sorted(
            migcaps.read_cap_minor(migcaps.access_file(proc_nvidia, cap))
            for cap in (migcaps.gi_cap(gpu.minor, dev.gi), migcaps.ci_cap(gpu.minor, dev.gi, dev.ci))
        )
    except migcaps.CapsError as exc:
        return str(exc)


def compare_mig(request: str, gpu: Gpu, dev: MigFacts, seen: dict[str, Any],
                caps: list[int] | str, check_proc: bool) -> list[str]:  # fmt: skip
    """What differs between one MIG device and what a container requesting it saw."""
    if "error" in seen:
        return [f"{request}: {seen['error']}"]
    bad = []
    if seen["dev"] != [gpu.minor]:
        bad.append(f"device nodes {seen['dev']}, expected [{gpu.minor}] (the parent only)")
    nv = seen["nvml"]
    if "error" in nv:
        bad.append(f"NVML: {nv['error']}")
    else:
        got = [g.get("uuid") or f"<{g.get('error')}>" for g in nv["gpus"]]
        if got != [gpu.uuid]:
            bad.append(f"NVML lists {nv['count']} GPU(s): {', '.join(got) or 'none'}; "
                       f"expected the parent {gpu.uuid} alone")  # fmt: skip
        for g in nv["gpus"]:
            if g.get("uuid") != gpu.uuid:
                continue
            if "mig_error" in g:
                bad.append(f"NVML MIG devices: {g['mig_error']}")
            elif g.get("mig") != [dev.uuid]:
                bad.append(f"NVML lists MIG devices {', '.join(g.get('mig') or []) or 'none'}; "
                           f"expected {dev.uuid} alone")  # fmt: skip
    if isinstance(caps, list) and seen.get("caps") != caps:
        bad.append(f"/dev/nvidia-caps nodes {seen.get('caps')}, expected {caps} (its GI and CI)")
    if check_proc:
        bus = [BusId.parse(gpu.pci_bus_id).procfs]
        if seen["proc"] is None:
            bad.append("no /proc/driver/nvidia/gpus in the container")
        elif seen["proc"] != bus:
            bad.append(f"/proc/driver/nvidia/gpus {seen['proc']}, expected {bus}")
    return [f"{request}: " + "; ".join(bad)] if bad else []


def mig_isolation(add, inv: inventory.Inventory, probe_with, tag: str, check_proc: bool,
                  proc_nvidia: str = PROC_DRIVER_NVIDIA) -> None:  # fmt: skip
    """mig.isolation for every MIG device: ``<gpu>:<n>`` and its UUID, each in a container."""
    index = {id(g): i for i, g in enumerate(inv.every_gpu())}
    devices = [(g, d) for g in inv.gpus if g.uuid and not g.lost for d in g.mig_devices]
    if not devices:
        return
    requests = [(g, d, r) for g, d in devices for r in (f"{g.index}:{d.index}", d.uuid)]
    with ThreadPoolExecutor(max_workers=min(MIG_WORKERS, len(requests))) as pool:
        seen = list(pool.map(lambda x: probe_with(tag, x[2]), requests))
    for g, d in devices:
        caps = cap_minors(g, d, proc_nvidia)
        got = [s for (gg, dd, _), s in zip(requests, seen, strict=True) if gg is g and dd is d]
        names = [r for gg, dd, r in requests if gg is g and dd is d]
        bad = [x for r, s in zip(names, got, strict=True)
               for x in compare_mig(r, g, d, s, caps, check_proc)]  # fmt: skip
        where = {"gpu": index.get(id(g), g.index), "mig": d.index, "uuid": d.uuid}
        if bad:
            name = f"{g.index}:{d.index}"
            add("mig.isolation", FAIL, "; ".join(bad) + f": a container asking for MIG device "
                f"{name} does not get exactly it; see the cap nodes `gpunode explain` gives "
                f"with NVIDIA_VISIBLE_DEVICES={name}, check /dev/nvidia-caps against "
                "/proc/driver/nvidia-caps/mig-minors, and after a MIG change refresh the "
                "runtime's inventory (gpunode runtime refresh)", **where)  # fmt: skip
            continue
        how = f"NVML: {g.uuid} with only this MIG device; /dev/nvidia{g.minor}"
        how += (f"; cap nodes {', '.join(map(str, caps))}" if isinstance(caps, list)
                else f"; cap nodes not compared ({caps})")  # fmt: skip
        how += "; /proc/driver/nvidia/gpus" if check_proc else ""
        add("mig.isolation", PASS, f"{' and '.join(names)} ({d.profile or 'MIG device'}): "
            f"exactly this MIG device ({how})", **where)  # fmt: skip


def skip_mig(add, inv: inventory.Inventory | None, reason: str) -> None:
    """mig.isolation skipped for every MIG device (the containers cannot run)."""
    if inv is None:
        return
    index = {id(g): i for i, g in enumerate(inv.every_gpu())}
    for g in inv.gpus:
        for d in g.mig_devices:
            add("mig.isolation", SKIP, reason, gpu=index.get(id(g), g.index), mig=d.index,
                uuid=d.uuid)  # fmt: skip


def node_libcuda() -> str | None:
    """The node's libcuda.so.1 (from the linker cache), or None."""
    proc = tool.run(["ldconfig", "-p"])
    m = re.search(r"^\s*libcuda\.so\.1 \(.*=>\s*(/\S+)$", proc.stdout, re.M)
    return m[1] if m else None


def _host_has_libcuda() -> bool:
    return node_libcuda() is not None


def evaluate(
    inv: inventory.Inventory | None, expect: Expectations, engine_up: bool,
    *, proc_gpus: str = "/proc/driver/nvidia/gpus", runner: tuple | None = None,
) -> list[Check]:  # fmt: skip
    """The container checks. ``runner``: (make the image () -> (tag, built), probe
    (tag, request) -> what the container saw) for another way of running containers (the
    CRI: gpunode.validate.cri.runner); default the engine's own command line."""
    checks: list[Check] = []
    add = titled(checks, TITLES)

    usable = [g for g in (inv.gpus if inv else []) if g.uuid and not g.lost]
    reason = None
    if expect.engine == "none":
        reason = "--engine none: container checks not requested"
    elif not engine_up:
        reason = f"the {expect.engine} engine does not answer (see engine.active)"
    elif not usable:
        reason = "no usable GPU on this node to give a container"
    if reason:
        for cid in CONTAINER_CHECKS:
            add(cid, SKIP, reason)
        skip_mig(add, inv, reason)
        return checks
    runtime = expect.runtime_name
    if expect.engine == "podman":
        from ..engines.common import RUNTIME_PATH

        runtime = RUNTIME_PATH
    if runner is None:
        ask_by = request_channel()
        runner = (
            lambda: ensure_image(expect.engine),
            lambda tag, r: run_probe(expect.engine, runtime, tag, r, ask_by),
        )
    make_image, probe_with = runner
    try:
        tag, built = make_image()
    except (ImageError, OSError) as exc:
        add("container.image", FAIL, str(exc))
        for cid in ("container.isolation", "container.cuda"):
            add(cid, SKIP, "no probe image")
        skip_mig(add, inv, "no probe image (see container.image)")
        return checks
    add("container.image", PASS, f"{tag} ({'built from local files' if built else 'cached'})")

    # one GPU: a whole one where the node has one (a MIG-enabled GPU given whole has no
    # CUDA device: its work runs on MIG devices), and all
    one = next((g for g in usable if not g.mig_mode), usable[0])
    requests = {one.uuid: [one], "all": usable}
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        seen = dict(zip(requests, pool.map(lambda r: probe_with(tag, r), requests), strict=True))
    check_proc = os.path.isdir(proc_gpus)
    bad = [d for r, want in requests.items() for d in compare(r, want, seen[r], check_proc)]
    if bad:
        add("container.isolation", FAIL, "; ".join(bad))
    else:
        how = "device nodes, NVML UUIDs" + (", /proc/driver/nvidia/gpus" if check_proc else "")
        add("container.isolation", PASS,
            f"1 GPU ({one.uuid}) and all {len(usable)}: exactly those ({how})")  # fmt: skip

    cuda_checks(add, requests, seen, len(usable))
    mig_isolation(add, inv, probe_with, tag, check_proc, os.path.dirname(proc_gpus))
    return checks


def cuda_checks(add, requests: dict[str, list], seen: dict[str, Any], count: int) -> None:
    """container.cuda from the containers of container.isolation."""
    results = {r: s.get("cuda") for r, s in seen.items() if "cuda" in s}
    if len(results) < len(requests):
        add("container.cuda", SKIP, "the containers did not run (see container.isolation)")
        return
    no_device = [
        c for c in results.values() if c.get("absent") or c.get("init") == CUDA_ERROR_NO_DEVICE
    ]
    if no_device:
        if any(c.get("absent") for c in no_device) and _host_has_libcuda():
            add("container.cuda", FAIL, "libcuda.so.1 is on the node but the container "
                "could not load it (not injected, or its libraries missing): "
                + no_device[0]["error"])  # fmt: skip
        else:
            add(
                "container.cuda",
                SKIP,
                f"the node reports no CUDA-capable device ({no_device[0]['error']})",
            )
        return
    cbad = []
    for r, c in results.items():
        want = len(requests[r])
        if "error" in c:
            cbad.append(f"{r}: {c['error']}")
        elif c["count"] != want:
            cbad.append(f"{r}: cuDeviceGetCount {c['count']}, expected {want}")
    if cbad:
        add("container.cuda", FAIL, "; ".join(cbad))
    else:
        add(
            "container.cuda",
            PASS,
            f"cuInit ok; cuDeviceGetCount = 1 and {count} as requested",
        )
