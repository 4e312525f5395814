"""The pod sandbox (pause) image, built locally: containerd's CRI cannot start a pod without
one, and nodes must not depend on a registry.

The image is one static executable (``pause.c``: waits for SIGINT/SIGTERM, reaps children),
compiled with ``musl-gcc`` when present (a ~30 KB binary) or ``cc -static``, and packed by
this module — not by an engine, so no Docker is needed to build it — as a Docker image
archive (``docker save`` layout: ``manifest.json``, the config blob, one layer tar), the format
``ctr images import`` and ``docker load`` both read. Every tar entry is written with fixed
owner, mode and time, so the same binary always gives the same archive and image id; the tag is
taken from the config digest, so a changed pause program is a new image name and a node never
runs a stale one under the old name.

Import on a node: ``ctr -n k8s.io images import -`` with the archive on stdin (the namespace
containerd's CRI plugin reads), and ``sandbox_image`` in the CRI section naming ``image_name``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

SOURCE = Path(__file__).with_name("pause.c")
REPOSITORY = "gpunode.local/pause"
ENTRYPOINT = "/pause"
# containerd's CRI plugin keeps Kubernetes' images in this containerd namespace.
K8S_NAMESPACE = "k8s.io"
IMPORT_COMMAND = ("ctr", "-n", K8S_NAMESPACE, "images", "import", "-")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


class PauseError(RuntimeError):
    """The pause image cannot be built; the message is one line."""


def compiler() -> list[str]:
    """How to compile a static executable here: musl-gcc, else cc -static."""
    if shutil.which("musl-gcc"):
        return ["musl-gcc", "-static"]
    if shutil.which("cc"):
        return ["cc", "-static"]
    raise PauseError("no C compiler: install musl-tools or gcc to build the pause image")


def build_binary(dest: Path, cc: list[str] | None = None) -> Path:
    cc = cc or compiler()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    cmd = [cc[0], "-Os", "-Wall", "-Werror", "-s", "-o", str(tmp), str(SOURCE), *cc[1:]]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise PauseError(f"cannot run {cc[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        tmp.unlink(missing_ok=True)
        raise PauseError(
            f"compiling {SOURCE.name} with {cc[0]} failed: {lines[0] if lines else ''}"
        )
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)
    return dest


def _tar(members: list[tuple[str, bytes, int]]) -> bytes:
    """A tar of (name, content, mode) regular files with fixed owner and time."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_config(layer: bytes, arch: str, entrypoint: str | None = ENTRYPOINT) -> bytes:
    config = {
        "architecture": arch,
        "os": "linux",
        "config": {"WorkingDir": "/", **({"Entrypoint": [entrypoint]} if entrypoint else {})},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{_digest(layer)}"]},
        "history": [{"created_by": "gpunode.cri.pause", "created": "1970-01-01T00:00:00Z"}],
        "created": "1970-01-01T00:00:00Z",
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def archive_layer(layer: bytes, name: str, arch: str, entrypoint: str | None = None) -> bytes:
    """An image archive (``docker save`` layout) of one layer tar, tagged *name*."""
    config = image_config(layer, arch, entrypoint)
    config_hex = _digest(config)
    layer_path = f"{_digest(layer)}/layer.tar"
    manifest = [{"Config": f"{config_hex}.json", "RepoTags": [name], "Layers": [layer_path]}]
    members = [
        (f"{config_hex}.json", config, 0o644),
        (layer_path, layer, 0o644),
        ("manifest.json", json.dumps(manifest, separators=(",", ":")).encode(), 0o644),
    ]
    return _tar(members)


def machine_arch() -> str:
    return _ARCH.get(platform.machine(), platform.machine())


def archive(binary: bytes, arch: str | None = None) -> tuple[bytes, str]:
    """(the image archive of *binary* as /pause, the image name it carries)."""
    arch = arch or machine_arch()
    layer = _tar([(ENTRYPOINT.lstrip("/"), binary, 0o755)])
    name = f"{REPOSITORY}:{_digest(image_config(layer, arch))[:12]}"
    return archive_layer(layer, name, arch, ENTRYPOINT), name


def build(cache: Path) -> tuple[Path, str]:
    """Compile the pause program (once per source and compiler) and write its image archive
    under *cache*; (archive path, image name)."""
    cc = compiler()
    key = hashlib.sha256(SOURCE.read_bytes() + b"\0" + " ".join(cc).encode()).hexdigest()[:16]
    binary = cache / f"pause-{key}"
    if not binary.is_file():
        build_binary(binary, cc)
    data, name = archive(binary.read_bytes())
    path = cache / f"pause-image-{name.rsplit(':', 1)[1]}.tar"
    if not path.is_file():
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path, name
