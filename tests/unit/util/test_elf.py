"""gpunode.util.elf: DT_SONAME."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpunode.util import elf

VERSION = "535.261.03"


def test_soname_of_a_library(tmp_path, shared_lib):
    lib = shared_lib(f"libnvidia-ml.so.{VERSION}", "-Wl,-soname,libnvidia-ml.so.1")
    assert elf.soname(str(lib)) == "libnvidia-ml.so.1"
    assert elf.soname(str(shared_lib("libnone.so"))) is None  # no DT_SONAME


@pytest.mark.parametrize("bad", ["../../etc/evil.so", "a::b.so.1", "with space.so"])
def test_unsafe_soname_counts_as_none(tmp_path, bad, shared_lib):
    lib = shared_lib("libbad.so.1.0", f"-Wl,-soname,{bad}")
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


def test_not_elf_and_truncated(tmp_path, shared_lib):
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(elf.ElfError):
        elf.soname(str(text))
    lib = shared_lib("libz.so.1.0", "-Wl,-soname,libz.so.1")
    cut = tmp_path / "cut.so"
    cut.write_bytes(lib.read_bytes()[:80])
    with pytest.raises(elf.ElfError):
        elf.soname(str(cut))
