"""gpunode.elf (PT_INTERP, DT_SONAME) and the SONAME links discovery hands to the hook."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpunode import discover
from gpunode.util import elf

VERSION = "535.261.03"


def _lib(tmp_path: Path, name: str, *ldflags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")
    src = tmp_path / "lib.c"
    src.write_text("int gpunode_test(void) { return 1; }\n")
    out = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *ldflags], check=True)
    return out


def test_soname_of_a_library(tmp_path):
    lib = _lib(tmp_path, f"libnvidia-ml.so.{VERSION}", "-Wl,-soname,libnvidia-ml.so.1")
    assert elf.soname(str(lib)) == "libnvidia-ml.so.1"
    assert elf.soname(str(_lib(tmp_path, "libnone.so"))) is None  # no DT_SONAME


@pytest.mark.parametrize("bad", ["../../etc/evil.so", "a::b.so.1", "with space.so"])
def test_unsafe_soname_counts_as_none(tmp_path, bad):
    lib = _lib(tmp_path, "libbad.so.1.0", f"-Wl,-soname,{bad}")
    assert elf.soname(str(lib)) is None


def test_soname_matches_objdump_for_system_libraries():
    if shutil.which("objdump") is None:
        pytest.skip("objdump not available")
    libs = [
        p
        for p in sorted(Path("/usr/lib/x86_64-linux-gnu").glob("lib*.so.*"))
        if not p.is_symlink() and p.is_file()
    ][:40]
    if not libs:
        pytest.skip("no system libraries found")
    for lib in libs:
        dump = subprocess.run(["objdump", "-p", str(lib)], capture_output=True, text=True)
        want = next(
            (ln.split()[1] for ln in dump.stdout.splitlines() if ln.strip().startswith("SONAME")),
            None,
        )
        assert elf.soname(str(lib)) == want, lib


def test_not_elf_and_truncated(tmp_path):
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(elf.ElfError):
        elf.soname(str(text))
    lib = _lib(tmp_path, "libz.so.1.0", "-Wl,-soname,libz.so.1")
    cut = tmp_path / "cut.so"
    cut.write_bytes(lib.read_bytes()[:80])
    with pytest.raises(elf.ElfError):
        elf.soname(str(cut))


def test_has_interp(tmp_path):
    fd = os.open("/bin/true", os.O_RDONLY)
    try:
        assert elf.has_interp(fd) is True
    finally:
        os.close(fd)
    lib = _lib(tmp_path, "libx.so", "-Wl,-soname,libx.so")
    fd = os.open(lib, os.O_RDONLY)
    try:
        assert elf.has_interp(fd) is False
    finally:
        os.close(fd)


def test_library_sonames_only_where_the_name_differs(tmp_path):
    versioned = _lib(tmp_path, f"libcuda.so.{VERSION}", "-Wl,-soname,libcuda.so.1")
    same = _lib(tmp_path, "libsame.so.1", "-Wl,-soname,libsame.so.1")
    none = _lib(tmp_path, f"libnvidia-cfg.so.{VERSION}")
    missing = tmp_path / "gone.so.1"
    got = discover.library_sonames([str(versioned), str(same), str(none), str(missing)])
    assert got == {str(versioned): "libcuda.so.1"}
