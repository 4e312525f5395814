"""Node checks beyond the GPUs' own counters: a denylisted driver, the /dev/char links
containers need, and drift between what gpunode wrote and the driver the node runs now.

* ``node.nouveau`` (DCGM_FR_DENYLISTED_DRIVER): a loaded nouveau holds the GPUs (the
  preflight's own test: /sys/module/nouveau, or its line in /proc/modules).
* ``node.dev_char``: every NVIDIA device node has its ``/dev/char/<major>:<minor>`` link
  (gpunode.nvidia.devchar says why they matter).
* ``node.drift_cache``: the runtime's inventory cache describes this driver and these GPUs.
* ``node.drift_cdi``: the installed CDI spec is what ``gpunode cdi generate`` makes now.
* ``node.drift_containerd``: where gpunode's containerd drop-in is installed, containerd's
  merged configuration (``containerd config dump``) still has each handler it registers, with
  gpunode's runtime (another tool rewriting config.toml's imports or the CRI section is
  caught). Docker's daemon.json is engine.runtime_registered's.

Each reads what the runtime itself reads (runtime.toml, its cache, its spec); a node without
gpunode's runtime set up skips the drift checks with the reason.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

from ..engines import containerd
from ..nvidia import devchar, inventory
from ..nvidia.devices import under
from ..provision import preflight
from ..util import tool
from ..util.tool import one_line
from .model import FAIL, PASS, SKIP, WARN, Check, titled

TITLES = {
    "node.nouveau": "nouveau not loaded (DCGM_FR_DENYLISTED_DRIVER)",
    "node.dev_char": "/dev/char links of the driver's nodes",
    "node.drift_cache": "Runtime inventory cache matches the driver",
    "node.drift_cdi": "CDI spec matches the driver",
    "node.drift_containerd": "containerd still runs gpunode's handlers",
}


def evaluate(inv: inventory.Inventory | None, root: str = "/") -> list[Check]:
    out: list[Check] = []
    add = titled(out, TITLES)
    add(*nouveau(root))
    if inv is None:
        why = "no NVIDIA driver"
        for cid in ("node.dev_char", "node.drift_cache", "node.drift_cdi", "node.drift_containerd"):
            add(cid, SKIP, why)
        return out
    from ..runtime import config as runtime_config

    try:
        cfg = runtime_config.load(write_caches=False)
    except runtime_config.ConfigError as exc:
        cfg, why = None, f"runtime.toml cannot be used: {exc}"
    add(*dev_char(under(cfg.dev_root if cfg else "/", "/dev")))
    if cfg is None:
        add("node.drift_cache", SKIP, why)
        add("node.drift_cdi", SKIP, why)
        add(*drift_containerd())
        return out
    add(*drift_cache(cfg, inv))
    add(*drift_cdi(cfg))
    add(*drift_containerd())
    return out


def nouveau(root: str = "/") -> tuple[str, str, str]:
    """nouveau as the driver role's preflight sees it (gpunode.provision.preflight)."""
    if preflight.nouveau_loaded(Path(root)):
        return (
            "node.nouveau",
            FAIL,
            "nouveau is loaded and holds the GPUs: blacklist it (the nvidia_driver role writes "
            "/etc/modprobe.d/blacklist-nouveau.conf), update the initramfs and reboot",
        )
    return "node.nouveau", PASS, "nouveau is not loaded (/sys/module, /proc/modules)"


def dev_char(dev: str = "/dev") -> tuple[str, str, str]:
    nodes = devchar.driver_nodes(dev)
    if not nodes:
        return "node.dev_char", SKIP, f"no NVIDIA device node in {dev}"
    absent = devchar.missing(dev)
    if not absent:
        return "node.dev_char", PASS, f"{len(nodes)} driver node(s) linked in {dev}/char"
    link, node = absent[0]
    more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
    return (
        "node.dev_char",
        WARN,
        f"{link} -> {node}{more} missing: with systemd's cgroup driver, containers lose "
        "these devices at the next `systemctl daemon-reload` (NVML: Unknown Error); "
        "run `gpunode runtime refresh`",
    )


def drift_cache(cfg, inv: inventory.Inventory) -> tuple[str, str, str]:
    from ..runtime import discovery

    data = discovery.read_cache(cfg.cache_file)
    if data is None:
        return (
            "node.drift_cache",
            SKIP,
            f"no usable cache at {cfg.cache_file} (the runtime writes it at its first GPU "
            "container; `gpunode runtime refresh` writes it now)",
        )
    node = data.get("node") or {}
    cached = node.get("driver_version")
    fix = "run `gpunode runtime refresh` (the runtime would rediscover at its next start)"
    if cached != inv.driver_version:
        return (
            "node.drift_cache",
            FAIL,
            f"{cfg.cache_file} describes driver {cached}, the node runs {inv.driver_version}: "
            + fix,
        )
    cached_gpus = sorted(g.get("uuid") for g in node.get("gpus") or [])
    # the GPUs NVML reads (a lost GPU fails its own check; discovery cannot list it either)
    found = sorted(g.uuid for g in inv.gpus if g.uuid and not g.lost)
    if cached_gpus != found:
        return (
            "node.drift_cache",
            FAIL,
            f"{cfg.cache_file} lists {len(cached_gpus)} GPU(s), NVML {len(found)} "
            f"({', '.join(sorted(set(cached_gpus) ^ set(found)))} differ): " + fix,
        )
    return "node.drift_cache", PASS, f"{cfg.cache_file}: driver {cached}, {len(found)} GPU(s)"


def drift_cdi(cfg) -> tuple[str, str, str]:
    from ..runtime import cdi, plan

    path = cdi.install_path(cfg.cdi_spec_dirs)
    if not os.path.exists(path):
        return "node.drift_cdi", SKIP, f"no CDI spec at {path} (CDI not in use)"
    try:
        with open(path, encoding="utf-8") as f:
            installed = f.read()
        fresh = cdi.render(plan.cdi_spec(cfg, store=False), path)
    except Exception as exc:
        return "node.drift_cdi", SKIP, f"cannot compare {path}: {exc}"
    if installed == fresh:
        return "node.drift_cdi", PASS, f"{path} is what `gpunode cdi generate` makes now"
    return (
        "node.drift_cdi",
        FAIL,
        f"{path} differs from the spec for the driver and GPUs the node has now "
        f"({_first_difference(installed, fresh)}): run `gpunode cdi generate --install`",
    )


def _first_difference(old: str, new: str) -> str:
    for n, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False), 1):
        if a != b:
            return f"line {n}: {a.strip()!r}, now {b.strip()!r}"
    return "one is longer"


def drift_containerd(
    config: str = containerd.CONFIG_TOML, drop_in_dir: str = containerd.DROP_IN_DIR
) -> tuple[str, str, str]:
    cid = "node.drift_containerd"
    drop_in = os.path.join(drop_in_dir, containerd.DROP_IN_NAME)
    try:
        with open(drop_in, "rb") as f:
            ours = tomllib.load(f)
    except FileNotFoundError:
        return cid, SKIP, f"no {drop_in}: containerd is not set up for gpunode"
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return cid, FAIL, f"{drop_in} cannot be read ({one_line(str(exc))}): run the runtime role"
    wanted = {name: binary for name, binary in _handlers(ours).items() if binary}
    exe = shutil.which(containerd.CONTAINERD)
    if exe is None:
        return cid, SKIP, f"{drop_in} is there but containerd is not installed"
    ran = tool.run([exe, "--config", config, "config", "dump"], timeout=60)
    if ran.returncode != 0:
        why = one_line(ran.stderr) or f"exit {ran.returncode}"
        return cid, FAIL, f"`containerd config dump` failed: {why}"
    try:
        merged = _handlers(tomllib.loads(ran.stdout))
    except tomllib.TOMLDecodeError as exc:
        return cid, FAIL, f"`containerd config dump` printed no TOML ({one_line(str(exc))})"
    fix = "run `gpunode runtime configure containerd` (the runtime role) and restart containerd"
    for name, binary in sorted(wanted.items()):
        if name not in merged:
            return (
                cid,
                FAIL,
                (
                    f"containerd's merged config has no handler {name!r} (is {drop_in} still "
                    f"imported by {config}?): {fix}"
                ),
            )
        if merged[name] != binary:
            return (
                cid,
                FAIL,
                (
                    f"containerd's handler {name!r} runs {merged[name] or 'runc'}, not {binary}: {fix}"
                ),
            )
    names = ", ".join(sorted(wanted))
    return cid, PASS, f"containerd's merged config has {names} running gpunode's runtime"


def _handlers(config: dict) -> dict[str, str]:
    """{handler: its BinaryName, "" when unset (runc's)} of the CRI runtimes, config version
    2 or 3."""
    out: dict[str, str] = {}
    section = containerd.runtimes_section(config) or {}
    runtimes = (section.get("containerd") or {}).get("runtimes") or {}
    for name, entry in runtimes.items():
        binary = ((entry or {}).get("options") or {}).get("BinaryName")
        out[name] = binary if isinstance(binary, str) else ""
    return out
