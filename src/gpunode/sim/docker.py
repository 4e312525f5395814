"""Thin wrappers over the docker CLI used by the simulator (host side)."""

from __future__ import annotations

import shutil
import subprocess

from ..util.command import OperationError


class DockerError(OperationError, RuntimeError):
    pass


def docker(
    args: list[str], *, input: bytes | None = None, check: bool = True, timeout: float | None = 600
) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("docker")
    if exe is None:
        raise DockerError(
            "the docker CLI is not installed; run scripts/setup (it installs docker.io)"
        )
    proc = subprocess.run(
        [exe, *args], input=input, capture_output=True, check=False, timeout=timeout
    )
    if check and proc.returncode != 0:
        err = [
            ln.strip()
            for ln in proc.stderr.decode(errors="replace").splitlines()
            if ln.strip() and "--help" not in ln
        ]
        raise DockerError(f"docker {args[0]}: {err[0] if err else 'failed'}")
    return proc


def image_exists(tag: str) -> bool:
    return docker(["image", "inspect", tag], check=False).returncode == 0


def engine_ok() -> bool:
    try:
        return docker(["info"], check=False, timeout=30).returncode == 0
    except (DockerError, subprocess.TimeoutExpired):
        return False


def exec_(
    container: str,
    cmd: list[str],
    *,
    input: bytes | None = None,
    check: bool = True,
    timeout: float | None = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    args = ["exec"]
    if input is not None:
        args.append("-i")
    for k, v in (env or {}).items():
        args += ["-e", f"{k}={v}"]
    return docker([*args, container, *cmd], input=input, check=check, timeout=timeout)
