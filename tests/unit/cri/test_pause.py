"""The locally built pause image: a static program that stops on SIGTERM, packed as an image
archive that ctr and docker import."""

from __future__ import annotations

import hashlib
import io
import json
import signal
import subprocess
import tarfile
import time

import pytest

from gpunode.cri import pause


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def read(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile(name).read()


def test_archive_layout_and_config():
    data, name = pause.archive(b"\x7fELF-binary", arch="amd64")
    manifest = json.loads(read(data, "manifest.json"))
    assert len(manifest) == 1
    entry = manifest[0]
    assert entry["RepoTags"] == [name]
    config_bytes = read(data, entry["Config"])
    config_hex = hashlib.sha256(config_bytes).hexdigest()
    assert entry["Config"] == f"{config_hex}.json"
    assert name == f"gpunode.local/pause:{config_hex[:12]}"
    (layer_path,) = entry["Layers"]
    layer = read(data, layer_path)
    config = json.loads(config_bytes)
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"],
    }
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"]["Entrypoint"] == ["/pause"]
    files = members(layer)
    assert list(files) == ["pause"]
    assert files["pause"].mode == 0o755 and files["pause"].uid == 0 and files["pause"].isfile()
    assert read(layer, "pause") == b"\x7fELF-binary"
    assert sorted(members(data)) == sorted([entry["Config"], layer_path, "manifest.json"])
    assert all(m.mtime == 0 and m.uid == 0 for m in members(data).values())


def test_archive_is_reproducible_and_named_by_content():
    a = pause.archive(b"one", arch="amd64")
    assert pause.archive(b"one", arch="amd64") == a
    b = pause.archive(b"two", arch="amd64")
    assert b[1] != a[1]
    assert pause.archive(b"one", arch="arm64")[1] != a[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("pause")
    return cache, *pause.build(cache)


def _layer(path) -> str:
    return json.loads(read(path.read_bytes(), "manifest.json"))[0]["Layers"][0]


def test_built_binary_is_static_and_stops_on_sigterm(built):
    cache, path, _name = built
    (binary,) = [p for p in cache.iterdir() if p.name.startswith("pause-") and p.suffix == ""]
    elf = binary.read_bytes()
    assert elf[:4] == b"\x7fELF"
    assert b"ld-linux" not in elf and b"ld-musl" not in elf  # no program interpreter: static
    assert read(read(path.read_bytes(), _layer(path)), "pause") == elf
    proc = subprocess.Popen([binary])
    time.sleep(0.2)
    assert proc.poll() is None  # it waits
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0


def test_build_reuses_the_binary(built, monkeypatch):
    cache, path, name = built
    monkeypatch.setattr(pause, "build_binary", lambda *a: pytest.fail("compiled again"))
    assert pause.build(cache) == (path, name)


def test_compiler_failure_is_one_line(tmp_path):
    with pytest.raises(pause.PauseError) as err:
        pause.build_binary(tmp_path / "p", ["cc", "-Wl,--no-such-option-gpunode"])
    assert "\n" not in str(err.value) and "compiling pause.c with cc failed" in str(err.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(pause.PauseError, match="cannot run /nonexistent/cc"):
        pause.build_binary(tmp_path / "p", ["/nonexistent/cc"])
