"""The isolation matrix's requests and how each engine channel makes them; the probe that
judges what a container sees is tests/integration/node/probe.py (device nodes, NVML UUIDs
from inside, /proc/driver/nvidia/gpus)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from gpunode.nvidia.busid import BusId

PROBE = Path(__file__).resolve().parents[1] / "integration" / "node" / "probe.py"
WORK = "/var/lib/gpunode-infra"
REQUESTS = ("all", "none", "void", "unset", "one-index", "indices", "uuid", "pci-bus-id", "mix")
# what each channel can express (CDI has names by index, UUID and all; --gpus has no none/void)
CHANNELS = {
    "runtime": REQUESTS,
    "gpus": ("all", "unset", "one-index", "indices", "uuid", "pci-bus-id", "mix"),
    "cdi-podman": ("all", "unset", "one-index", "indices", "uuid", "mix"),
    "cdi-docker": ("all", "unset", "one-index", "indices", "uuid", "mix"),
}
CASES = [(ch, rq) for ch, rqs in CHANNELS.items() for rq in rqs]


class Gpus:
    def __init__(self, inv: dict):
        self.gpus = sorted(inv["gpus"], key=lambda g: g["index"])
        self.n = len(self.gpus)

    def request(self, name: str, channel: str) -> tuple[list[str] | None, list[int] | None]:
        """(the request's items, or None for unset; the selected indices, or None when the
        container is not a GPU container at all). CDI names GPUs by index and UUID only, so
        its mix is of those two."""
        if name == "mix" and channel.startswith("cdi"):
            if self.n < 2:
                pytest.skip(f"the mix request needs 2 GPUs; this node has {self.n}")
            return [str(self.n - 1), self.gpus[0]["uuid"]], [self.n - 1, 0]
        g, last = self.gpus, self.n - 1
        need = {"indices": 2, "mix": 3, "pci-bus-id": 2}.get(name, 1)
        if self.n < need:
            pytest.skip(f"the {name} request needs {need} GPUs; this node has {self.n}")
        return {
            "all": (["all"], list(range(self.n))),
            "none": (["none"], []),
            "void": (["void"], None),
            "unset": (None, None),
            "one-index": ([str(last)], [last]),
            "indices": (["0", str(last)], [0, last]),
            "uuid": ([g[last]["uuid"]], [last]),
            "pci-bus-id": ([BusId.parse(g[1]["pci_bus_id"]).procfs], [1]),
            "mix": (
                [str(last), g[0]["uuid"], BusId.parse(g[1]["pci_bus_id"]).procfs],
                [last, 0, 1],
            ),
        }[name]


def image(node) -> str:
    img = node.vars.get("gpunode_infra_image") or os.environ.get("GPUNODE_INFRA_IMAGE")
    if not img:
        pytest.fail(
            f"{node.name}: set gpunode_infra_image (inventory) or GPUNODE_INFRA_IMAGE: an image "
            "with python3 present in the node's engines",
            pytrace=False,
        )
    return img


def prepare(node) -> str:
    """The probe on the node, and the node's pynvml to mount next to it; the docker -v args."""
    node.ok(f"mkdir -p {WORK}")
    node.ok(f"cat > {WORK}/probe.py <<'EOF'\n{PROBE.read_text()}\nEOF")
    venv = node.vars.get("gpunode_install_venv", "/opt/gpunode")
    pynvml = node.ok(f"{venv}/bin/python -c 'import pynvml; print(pynvml.__file__)'").strip()
    return (
        f"-v {pynvml}:/opt/pynvml/pynvml.py:ro -v {WORK}/probe.py:/opt/probe.py:ro "
        "-e PYTHONPATH=/opt/pynvml --network none"
    )


def channel_command(node, channel: str, items: list[str] | None, mounts: str) -> str:
    img = image(node)
    run = "python3 /opt/probe.py"
    if channel == "runtime":
        env = "" if items is None else f"-e NVIDIA_VISIBLE_DEVICES={shlex.quote(','.join(items))}"
        return f"docker run --rm --runtime gpunode {env} {mounts} {img} {run}"
    if channel == "gpus":
        if items is None:
            flag = ""
        elif items == ["all"]:
            flag = "--gpus all"
        else:
            flag = "--gpus " + shlex.quote(json.dumps("device=" + ",".join(items)))
        return f"docker run --rm {flag} {mounts} {img} {run}"
    devices = " ".join(f"--device nvidia.com/gpu={shlex.quote(i)}" for i in items or [])
    if channel == "cdi-podman":
        if not node.has("podman"):
            pytest.skip(f"{node.name}: podman is not installed")
        return f"podman --cgroup-manager cgroupfs run --rm {devices} {mounts} {img} {run}"
    dirs = node.run("docker info --format '{{json .CDISpecDirs}}'").stdout.strip()
    if dirs in ("", "null", "[]", "<no value>"):
        pytest.skip(f"{node.name}: this Docker has no CDI (needs >= 25 with features.cdi)")
    return f"docker run --rm --runtime runc {devices} {mounts} {img} {run}"


def need_cdi_spec(node, channel: str) -> None:
    if channel.startswith("cdi") and not node.host.file("/etc/cdi/nvidia.yaml").exists:
        pytest.skip(f"{node.name}: no /etc/cdi/nvidia.yaml (gpunode cdi generate --install)")
