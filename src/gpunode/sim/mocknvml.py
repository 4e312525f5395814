"""Build the mock NVML library (the C files of ``mocknvml/``) and embed a node profile in it.

The library's sources are the ``*.c`` files of the package directory ``mocknvml/`` (one a
NVML object or concern, sharing ``common.h``; :func:`sources`), compiled together with the
generated stubs into one shared library; ``migstate.h``, the MIG state's files, formats and
cap minors, is generated from :mod:`gpunode.sim.migstate` at build time.

The library exports a fixed-size ``gpunode_profile_blob`` whose initial bytes are
:data:`MAGIC`. :func:`embed_profile` patches a built library in place of that blob (no
recompilation), so one build can serve many simulated nodes.

Payload format (UTF-8 text after the magic line, NUL-terminated, one record per
line, fields separated by a single TAB)::

    driver_version<TAB>535.261.03
    nvml_version<TAB>12.535.261.03
    cuda_driver_version<TAB>12020
    gpu<TAB>minor=0<TAB>uuid=GPU-...<TAB>bus_id=00000000:07:00.0<TAB>name=...<TAB>...

The library exports every function NVIDIA's ``nvml.h`` declares and every ``nvml*`` entry
point the installed nvidia-ml-py can call, so that tools which bind NVML lazily (go-nvml,
C programs) never meet a missing symbol. The header's list is the package file
``nvml-functions.txt`` (:data:`DECLARED`; where it came from and how to regenerate it from
an ``nvml.h`` is in its header, written by ``python -m gpunode.sim.mocknvml``); pynvml's is
read from its source at build time. :func:`nvml_names` is their union; the functions
``mocknvml/`` does not implement get a generated stub (:func:`stubs_source`).

Standard library only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..util.command import OperationError
from ..util.files import write_atomic
from . import fabric, migstate

MAGIC = b"GPUNODE-NVML-PROFILE-V1\n"
BLOB_SIZE = 262144

__all__ = [
    "BLOB_SIZE",
    "DECLARED",
    "MAGIC",
    "MockBuildError",
    "build_digest",
    "build_library",
    "compile_c",
    "declared_names",
    "embed_profile",
    "header_names",
    "nvml_names",
    "pynvml_names",
    "render_declared",
    "source_dir",
    "sources",
    "stubs_source",
]

# How pynvml looks up each C function it calls.
_LOOKUP_RE = re.compile(r"""_nvmlGetFunctionPointer\(\s*["'](nvml[A-Za-z0-9_]+)["']\s*\)""")
# Fewer than this means pynvml's source (or a header) no longer has the form we read.
_MIN_NAMES = 100
# The functions NVIDIA's nvml.h declares: one name a line, '#' comments (package data).
DECLARED = Path(__file__).resolve().with_name("nvml-functions.txt")
# A declaration in nvml.h: "nvmlReturn_t DECLDIR nvmlFoo(" (and "const DECLDIR char*
# nvmlErrorString(") once comments are gone. Under NVML_NO_UNVERSIONED_FUNC_DEFS the header
# also declares the older versions its #defines replace (nvmlDeviceGetGridLicensableFeatures
# and its _v2, _v3 beside _v4, ...): the real library still exports them and go-nvml binds
# them, so they count too.
_DECL_RE = re.compile(r"\bDECLDIR\b[^;(]*?\b(nvml[A-Za-z0-9_]+)\s*\(")
_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_NAME_RE = re.compile(r"nvml[A-Za-z0-9_]+")


class MockBuildError(OperationError, RuntimeError):
    """The mock NVML library could not be built or patched."""


def source_dir() -> Path:
    """The directory of the library's C sources, next to this module (package data)."""
    return Path(__file__).resolve().with_name("mocknvml")


def sources() -> list[Path]:
    """The library's C files (compiled together; they include ``common.h``), sorted."""
    found = sorted(source_dir().glob("*.c"))
    if not found:
        raise MockBuildError(f"{source_dir()}: no C sources of the mock NVML")
    return found


def header_names(text: str) -> list[str]:
    """The functions an nvml.h declares, sorted (comments ignored)."""
    return sorted(set(_DECL_RE.findall(_COMMENT_RE.sub(" ", text))))


def declared_names(path: Path | None = None) -> list[str]:
    """The names in a function list written by :func:`render_declared` (sorted); by
    default :data:`DECLARED`."""
    path = DECLARED if path is None else path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise MockBuildError(f"cannot read {path}: {exc.strerror}") from None
    names = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not _NAME_RE.fullmatch(line):
            raise MockBuildError(f"{path}:{number}: {line!r} is not an NVML function name")
        names.append(line)
    if len(names) < _MIN_NAMES:
        raise MockBuildError(
            f"{path}: only {len(names)} NVML function names; expected at least {_MIN_NAMES}"
        )
    return sorted(set(names))


def render_declared(header: Path, source: str) -> str:
    """The text of ``nvml-functions.txt`` for *header*, described as *source*."""
    try:
        data = header.read_bytes()
    except OSError as exc:
        raise MockBuildError(f"cannot read {header}: {exc.strerror}") from None
    names = header_names(data.decode("utf-8", errors="replace"))
    if len(names) < _MIN_NAMES:
        raise MockBuildError(
            f"{header}: found only {len(names)} declarations (DECLDIR nvml...(); "
            f"expected at least {_MIN_NAMES}: is it nvml.h?"
        )
    head = [
        "# The functions NVIDIA's nvml.h declares, one a line: the mock NVML exports each",
        "# (gpunode.sim.mocknvml); those mocknvml/*.c do not implement answer Not Supported.",
        f"# Source: {source}",
        f"# nvml.h sha256 {hashlib.sha256(data).hexdigest()}, {len(names)} functions.",
        "# Regenerate from an nvml.h (writes this file, header included); NVIDIA ships nvml.h",
        "# in the PyPI wheel nvidia-nvml-dev (Debian: libnvidia-ml-dev, non-free):",
        "#   pip download --no-deps -d /tmp/nvml nvidia-nvml-dev==VERSION",
        "#   python -m zipfile -e /tmp/nvml/nvidia_nvml_dev-VERSION-*.whl /tmp/nvml",
        "#   python -m gpunode.sim.mocknvml /tmp/nvml/nvidia/cu13/include/nvml.h 'SOURCE' \\",
        "#     > src/gpunode/sim/nvml-functions.txt",
    ]
    return "\n".join(head + names) + "\n"


def pynvml_names() -> list[str]:
    """Every NVML function the installed nvidia-ml-py can call, sorted."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin:
        raise MockBuildError(
            "nvidia-ml-py (module pynvml) is not installed; it names the NVML functions "
            "the mock must export (pip install nvidia-ml-py)"
        )
    try:
        text = Path(spec.origin).read_text(encoding="utf-8")
    except OSError as exc:
        raise MockBuildError(f"cannot read {spec.origin}: {exc.strerror}") from None
    names = sorted(set(_LOOKUP_RE.findall(text)))
    if len(names) < _MIN_NAMES:
        raise MockBuildError(
            f"{spec.origin}: found only {len(names)} NVML function names "
            f'(_nvmlGetFunctionPointer("nvml...")); expected at least {_MIN_NAMES}'
        )
    return names


def nvml_names() -> list[str]:
    """What the mock exports: the header's functions and pynvml's, sorted."""
    return sorted(set(declared_names()) | set(pynvml_names()))


def stubs_source(names: list[str]) -> str:
    """C source of a weak stub for each name; the definitions in mocknvml/ override them.

    Every NVML entry point returns nvmlReturn_t (an int) except nvmlErrorString, which
    mocknvml/init.c implements. A stub is declared ``int f(void)`` whatever the real
    parameters: on x86_64 (System V ABI) arguments travel in registers and on the
    caller's stack, which the caller also cleans up, so a callee that ignores them leaves
    nothing unbalanced, and the int comes back in %eax as the caller expects.
    """
    lines = [
        "/* Generated by gpunode.sim.mocknvml.stubs_source (nvml.h's and nvidia-ml-py's "
        "functions): do not edit. */",
        'extern int gpunode_mock_unsupported(void) __attribute__((visibility("hidden")));',
        '#define STUB(fn) __attribute__((weak, visibility("default"))) int fn(void) '
        "{ return gpunode_mock_unsupported(); }",
    ]
    lines += [f"STUB({name})" for name in names]
    return "\n".join(lines) + "\n"


def build_digest() -> str:
    """Identifies what build_library would produce: the C sources, the name list and the
    generated migstate.h (so a changed nvml-functions.txt, nvidia-ml-py or MIG state
    definition rebuilds the library)."""
    h = hashlib.sha256()
    for path in sorted(source_dir().glob("*.[ch]")):
        h.update(f"{path.name}\0{len(path.read_bytes())}\0".encode())
        h.update(path.read_bytes())
    h.update(stubs_source(nvml_names()).encode())
    h.update(migstate.c_header(fabric.c_defines()).encode())
    return h.hexdigest()


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


def compile_c(sources: list[Path], dest: Path, flags: list[str], cc: str = "cc") -> Path:
    """Compile C *sources* into *dest* with *flags* (atomic replace, mode 0755)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_in(dest.parent, dest.name)
    cmd = [cc, "-O2", "-Wall", "-Werror", "-o", str(tmp), *map(str, sources), *flags]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise MockBuildError(f"cannot run compiler {cc!r}: {exc}") from exc
        if proc.returncode != 0:
            first = _first_error_line(proc.stderr + "\n" + proc.stdout)
            what = Path(sources[0]).name if len(sources) == 1 else f"{Path(sources[0]).parent}"
            raise MockBuildError(
                f"compiling {what} with {cc} failed (exit {proc.returncode}): {first}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def build_library(dest: Path, cc: str = "cc") -> Path:
    """Compile the C files of mocknvml/ and the generated stubs into one shared library at
    *dest* (atomic replace)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".mocknvml-build.", dir=dest.parent) as tmp:
        generated = Path(tmp)
        stubs_c = generated / "nvml-stubs.c"
        stubs_c.write_text(stubs_source(nvml_names()), encoding="utf-8")
        (generated / "migstate.h").write_text(
            migstate.c_header(fabric.c_defines()), encoding="utf-8"
        )
        flags = ["-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-lpthread", f"-I{tmp}"]
        return compile_c([*sources(), stubs_c], dest, flags, cc)


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


def main(argv: list[str] | None = None) -> int:
    """``python -m gpunode.sim.mocknvml NVML_H SOURCE``: print nvml-functions.txt."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m gpunode.sim.mocknvml NVML_H 'SOURCE'", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(render_declared(Path(args[0]), args[1]))
    except MockBuildError as exc:
        print(f"mocknvml: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
