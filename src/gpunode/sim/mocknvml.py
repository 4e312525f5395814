"""Build the mock NVML library (``mocknvml.c``) and embed a node profile in it.

The C source exports a fixed-size ``gpunode_profile_blob`` whose initial bytes
are :data:`MAGIC`.  :func:`embed_profile` patches a built library in place of
that blob (no recompilation), so one build can serve many simulated nodes.

Payload format (UTF-8 text after the magic line, NUL-terminated, one record per
line, fields separated by a single TAB)::

    driver_version<TAB>535.261.03
    nvml_version<TAB>12.535.261.03
    cuda_driver_version<TAB>12020
    gpu<TAB>minor=0<TAB>uuid=GPU-...<TAB>bus_id=00000000:07:00.0<TAB>name=...<TAB>...

Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from ..util.files import write_atomic

MAGIC = b"GPUNODE-NVML-PROFILE-V1\n"
BLOB_SIZE = 262144

__all__ = [
    "BLOB_SIZE",
    "MAGIC",
    "MockBuildError",
    "build_library",
    "embed_profile",
    "source_path",
]


class MockBuildError(RuntimeError):
    """The mock NVML library could not be built or patched."""


def source_path() -> Path:
    """Path of the C source shipped next to this module (package data)."""
    return Path(__file__).resolve().with_name("mocknvml.c")


def _tmp_in(directory: Path, name: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    return Path(tmp)


def _first_error_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[0] if lines else "no compiler output"


def build_library(dest: Path, cc: str = "cc") -> Path:
    """Compile mocknvml.c into a shared library at *dest* (atomic replace)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = source_path()
    tmp = _tmp_in(dest.parent, dest.name)
    cmd = [
        cc,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Werror",
        "-Wl,-soname,libnvidia-ml.so.1",
        "-o",
        str(tmp),
        str(src),
        "-lpthread",
    ]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise MockBuildError(f"cannot run compiler {cc!r}: {exc}") from exc
        if proc.returncode != 0:
            first = _first_error_line(proc.stderr + "\n" + proc.stdout)
            raise MockBuildError(
                f"compiling {src.name} with {cc} failed (exit {proc.returncode}): {first}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def embed_profile(lib: Path, payload: str, dest: Path) -> bool:
    """Write a copy of *lib* to *dest* with *payload* embedded in its profile blob.

    Returns True if *dest* changed, False if it already held identical bytes.
    """
    lib = Path(lib)
    dest = Path(dest)
    data = lib.read_bytes()
    count = data.count(MAGIC)
    if count != 1:
        raise MockBuildError(f"{lib}: expected exactly one profile blob marker, found {count}")
    offset = data.index(MAGIC)
    body = payload.encode("utf-8")
    room = BLOB_SIZE - len(MAGIC) - 1  # keep at least one terminating NUL
    if b"\0" in body:
        raise ValueError("profile payload must not contain NUL bytes")
    if len(body) > room:
        raise ValueError(
            f"profile payload is {len(body)} bytes; at most {room} fit in the {BLOB_SIZE}-byte blob"
        )
    if offset + BLOB_SIZE > len(data):
        raise MockBuildError(f"{lib}: profile blob is truncated")
    blob = MAGIC + body + b"\0" * (BLOB_SIZE - len(MAGIC) - len(body))
    new = data[:offset] + blob + data[offset + BLOB_SIZE :]
    return write_atomic(dest, new, 0o755)
