"""api.proto compiled at build/test time into a cache directory keyed by its content.

Generated code is not committed: it would be a second home for the message definitions and
would pin the protobuf runtime it was generated for. ``grpc_tools.protoc`` (grpcio-tools, the
protoc the installed protobuf runtime matches) writes ``api_pb2.py`` into
``$GPUNODE_CACHE/cri/proto-<hash>`` (default ``~/.cache/gpunode``), where ``<hash>`` covers
the .proto and the grpcio-tools version, so an edited .proto or another protoc is compiled
afresh and an unchanged one is never compiled twice. Only the messages are generated: the
client names the RPC methods itself (``client.METHODS``), so no service stubs are needed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

PROTO = Path(__file__).with_name("api.proto")
PACKAGE = "runtime.v1"
_loaded: ModuleType | None = None


class ProtoError(RuntimeError):
    """api.proto cannot be compiled or loaded; the message is one line."""


def cache_root() -> Path:
    return Path(os.environ.get("GPUNODE_CACHE", Path.home() / ".cache" / "gpunode")) / "cri"


def _tools_version() -> str:
    try:
        return importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        raise ProtoError(
            "grpcio-tools is not installed; install the development requirements "
            "(pip install -r requirements-dev.txt)"
        ) from None


def build(cache: Path | None = None) -> Path:
    """Compile api.proto (once per content and protoc version); the path of api_pb2.py."""
    source = PROTO.read_bytes()
    key = hashlib.sha256(source + b"\0" + _tools_version().encode()).hexdigest()[:16]
    out_dir = (cache or cache_root()) / f"proto-{key}"
    target = out_dir / "api_pb2.py"
    if target.is_file():
        return target
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=".build-") as tmp:
        (Path(tmp) / "api.proto").write_bytes(source)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{tmp}",
                f"--python_out={tmp}",
                "api.proto",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            raise ProtoError(f"{PROTO}: protoc failed: {lines[-1] if lines else proc.returncode}")
        try:
            os.rename(tmp, out_dir)  # atomic: a concurrent build leaves one complete directory
        except OSError:
            if not target.is_file():
                raise
        else:
            os.mkdir(tmp)  # for TemporaryDirectory's cleanup
    return target


def messages(cache: Path | None = None) -> ModuleType:
    """The generated module (api_pb2), compiled if needed, loaded once per process."""
    global _loaded
    if _loaded is None:
        path = build(cache)
        spec = importlib.util.spec_from_file_location("gpunode_cri_api_pb2", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError as exc:
            raise ProtoError(f"{path}: cannot load the compiled CRI messages: {exc}") from None
        _loaded = module
    return _loaded
