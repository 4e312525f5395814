"""The hook's ld.so.cache writer against real glibc in real images.

For each image root (ldcache_rootfs: Debian bullseye = glibc 2.31; bookworm = 2.36 and
trixie = 2.41, new format with the extension section):

1. the image's own ldconfig (chrooted) rebuilds its own cache, in its own format, with an
   "image library" in a directory only its ld.so.conf names (/opt/imagelib). Debian 11's
   ldconfig writes the new format by default (Debian backported glibc 2.32's default);
   upstream 2.31's default, the compat format of Ubuntu 18.04/20.04 and Debian 10, comes
   from the same real ldconfig with ``-c compat``, and its old format with ``-c old``;
2. ``gpunode-hook update-ldcache`` (the product's CLI, as the runtime calls it) adds a test
   library that lives in a directory nothing else names (/opt/gpunodetest);
3. chrooted, the image's own loader runs a program needing both libraries: it runs (before
   step 2 it fails: the cache is the only way to the test library), LD_DEBUG shows both
   found through the cache, and the image's own ``ldconfig -p`` lists our entry and every
   entry it listed before.

Also: an image without any /etc/ld.so.cache, a musl root (its loader ignores the file: the
hook's write must not disturb it nor print anything), and several hundred tricky names
all resolved by the real loader (``ld.so --list``).

The test programs use no libc at all (``-nostdlib``, raw syscalls): one binary built with
the host's gcc runs on every glibc, however old; only the image's loader is exercised.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.sim import images
from gpunode.util import ldsocache

from . import ldcache_rootfs

SRC = Path(__file__).resolve().parents[2] / "src"
HOOK = [sys.executable, "-m", "gpunode.hook"]
LOADER = "/lib64/ld-linux-x86-64.so.2"
TESTDIR, IMAGEDIR = "/opt/gpunodetest", "/opt/imagelib"
TEST_SONAME, IMAGE_SONAME = "libgpunodetest.so.1", "libgpunodeimage.so.1"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.uname().machine != "x86_64" or os.geteuid() != 0,
        reason="x86-64 test programs, chroot as root",
    ),
]

LIB_C = "long {fn}(void) {{ return {value}; }}\n"
PROG_C = r"""
long gpunode_test(void);
#ifdef WITH_IMAGE
long gpunode_image(void);
#endif
static long sys3(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}
__attribute__((force_align_arg_pointer, noreturn)) void _start(void) {
  long v = gpunode_test();
#ifdef WITH_IMAGE
  v += gpunode_image();
#endif
  sys3(1, 1, (long)"gpunode-ok\n", 11);
  sys3(60, v == WANT ? 0 : 1, 0, 0);
  for (;;) {}
}
"""
NOLIBC = ["-nostdlib", "-nostartfiles", "-fno-stack-protector", "-O1"]
# The placeholder SONAME of the template library the fuzz test copies under many names.
PLACEHOLDER = b"lib" + b"P" * 60 + b".so.1"


def _gcc(*args: str) -> None:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed (scripts/setup installs it)", pytrace=False)
    subprocess.run(["gcc", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("progs")
    for name, fn, value, soname in [
        ("test", "gpunode_test", 40, TEST_SONAME),
        ("image", "gpunode_image", 2, IMAGE_SONAME),
        ("template", "gpunode_many", 1, PLACEHOLDER.decode()),
    ]:
        (d / f"{name}.c").write_text(LIB_C.format(fn=fn, value=value))
        out = d / (soname if name != "template" else "template.so")
        _gcc(
            *NOLIBC,
            "-shared",
            "-fPIC",
            f"-Wl,-soname,{soname}",
            "-o",
            str(out),
            str(d / f"{name}.c"),
        )
    (d / "prog.c").write_text(PROG_C)
    link = ["-L", str(d), f"-Wl,--dynamic-linker={LOADER}", "-Wl,--no-as-needed"]
    _gcc(
        *NOLIBC,
        "-DWANT=42",
        "-DWITH_IMAGE",
        "-o",
        str(d / "prog-both"),
        str(d / "prog.c"),
        *link,
        "-l:" + TEST_SONAME,
        "-l:" + IMAGE_SONAME,
    )
    _gcc(
        *NOLIBC,
        "-DWANT=40",
        "-o",
        str(d / "prog-test"),
        str(d / "prog.c"),
        *link,
        "-l:" + TEST_SONAME,
    )
    return d


def _tarball(name: str) -> Path:
    try:
        if name == "bullseye":
            return ldcache_rootfs.bullseye()
        kind = "workload" if name == "bookworm" else "node"
        return ldcache_rootfs.from_image(images.build(kind, name, log=lambda *_: None))
    except (RuntimeError, images.ImageError) as exc:
        pytest.fail(f"cannot get the {name} root: {exc}", pytrace=False)


def chroot(root: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["chroot", str(root), *argv],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **(env or {})},
        timeout=60,
        check=False,
    )


def hook(root: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [*HOOK, "update-ldcache", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(SRC)},
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def listed(root: Path) -> list[str]:
    """The image's own ldconfig -p, entry lines."""
    proc = chroot(root, "ldconfig", "-p")
    assert proc.returncode == 0, proc.stderr
    return sorted(ln.strip() for ln in proc.stdout.splitlines() if "=>" in ln)


def _install(root: Path, programs: Path) -> None:
    for d in (TESTDIR, IMAGEDIR):
        (root / d.lstrip("/")).mkdir(parents=True)
    shutil.copy(programs / TEST_SONAME, root / TESTDIR.lstrip("/"))
    shutil.copy(programs / IMAGE_SONAME, root / IMAGEDIR.lstrip("/"))
    for prog in ("prog-both", "prog-test"):
        shutil.copy(programs / prog, root / TESTDIR.lstrip("/"))


def _cache_magic(root: Path) -> bytes:
    return (root / "etc/ld.so.cache").read_bytes()[:20]


@pytest.mark.parametrize(
    ("release", "fmt"),
    [
        ("bullseye", "compat"),  # old format first, the new one inside
        ("bullseye", "old"),
        ("bullseye", "new"),
        ("bookworm", "new"),
        ("trixie", "new"),
    ],
)
def test_image_loader_finds_our_entry_and_its_own(tmp_path, programs, release, fmt):
    root = ldcache_rootfs.extract(_tarball(release), tmp_path / release)
    _install(root, programs)
    with open(root / "etc/ld.so.conf", "a") as fh:
        fh.write(f"{IMAGEDIR}\n")
    proc = chroot(root, "ldconfig", "-c", fmt)  # the image's own cache, by its own ldconfig
    assert proc.returncode == 0, proc.stderr
    magic = ldsocache.NEW_MAGIC if fmt == "new" else ldsocache.OLD_MAGIC
    assert _cache_magic(root).startswith(magic)
    compat = ldsocache.NEW_MAGIC in (root / "etc/ld.so.cache").read_bytes()
    assert compat is (fmt != "old")
    before = listed(root)
    assert any(ln.startswith(IMAGE_SONAME) for ln in before)
    assert len(before) > 20
    # without our entry the test library cannot be found: the cache is the only way
    proc = chroot(root, f"{TESTDIR}/prog-both")
    assert proc.returncode == 127 and TEST_SONAME in proc.stderr, proc

    proc = hook(root, "--library", f"{TEST_SONAME}::{TESTDIR}/{TEST_SONAME}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert _cache_magic(root) == ldsocache.NEW_MAGIC

    proc = chroot(root, f"{TESTDIR}/prog-both", env={"LD_DEBUG": "libs"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "gpunode-ok\n"
    for soname, d in ((TEST_SONAME, TESTDIR), (IMAGE_SONAME, IMAGEDIR)):
        lines = proc.stderr.splitlines()
        at = next(i for i, ln in enumerate(lines) if f"find library={soname}" in ln)
        assert "search cache=/etc/ld.so.cache" in lines[at + 1], lines[at : at + 3]
        assert f"trying file={d}/{soname}" in lines[at + 2], lines[at : at + 3]
    after = listed(root)
    assert set(before) <= set(after)
    assert set(after) - set(before) == {f"{TEST_SONAME} (libc6,x86-64) => {TESTDIR}/{TEST_SONAME}"}
    # the image's own programs (libc through the cache) still run
    assert chroot(root, "sh", "-c", "echo still-fine").stdout == "still-fine\n"


def test_image_without_a_cache(tmp_path, programs):
    root = ldcache_rootfs.extract(_tarball("bookworm"), tmp_path / "nocache")
    _install(root, programs)
    (root / "etc/ld.so.cache").unlink()
    proc = hook(root, "--library", f"{TEST_SONAME}::{TESTDIR}/{TEST_SONAME}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    proc = chroot(root, f"{TESTDIR}/prog-test")
    assert proc.returncode == 0 and proc.stdout == "gpunode-ok\n", proc.stderr
    assert listed(root) == [f"{TEST_SONAME} (libc6,x86-64) => {TESTDIR}/{TEST_SONAME}"]
    # libc is not in the cache: the loader's default directories find it
    assert chroot(root, "sh", "-c", "echo still-fine").stdout == "still-fine\n"


def _names(rng: random.Random, n: int) -> list[str]:
    """Distinct (under _dl_cache_libcmp) library names meant to trip the binary search:
    shared prefixes, numbers of different widths, digits mid-name."""
    seen: set[str] = set()
    out: list[str] = []
    stems = ["foo", "foo2", "foo10", "fo", "foox", "nvidia-ml", "cuda", "x", "x1y", "GL"]
    while len(out) < n:
        stem = rng.choice(stems) + "".join(
            rng.choice("ab1234567890-_") for _ in range(rng.randint(0, 3))
        )
        version = ".".join(
            str(rng.choice([0, 1, 2, 9, 10, 11, 99, 100, 535])) for _ in range(rng.randint(0, 3))
        )
        name = f"lib{stem}.so" + (f".{version}" if version else "")
        key = ldsocache.libcmp_key(name.encode())
        if key not in seen and len(name.encode()) <= len(PLACEHOLDER):
            seen.add(key)
            out.append(name)
    return out


def test_hundreds_of_entries_all_found_by_the_loader(tmp_path, programs):
    """300 tricky names (ours) on top of the image's cache: the image's loader,
    binary-searching our order with its own _dl_cache_libcmp, finds every one of them,
    and every x86-64 library of the image's cache, through the cache."""
    root = ldcache_rootfs.extract(_tarball("bookworm"), tmp_path / "many")
    many = root / "opt/many"
    many.mkdir(parents=True)
    template = (programs / "template.so").read_bytes()
    assert template.count(PLACEHOLDER) == 1
    names = _names(random.Random(11), 300)
    image: dict[str, set[str]] = {}
    for ln in listed(root):
        name, _, path = ln.partition(" (libc6,x86-64) => ")
        if path and not name.startswith("ld-linux"):
            image.setdefault(name, set()).add(path)
    assert len(image) > 20
    link = tmp_path / "link"  # link-time stand-ins: only their SONAMEs matter
    link.mkdir()
    for name in [*names, *image]:
        data = template.replace(PLACEHOLDER, name.encode().ljust(len(PLACEHOLDER), b"\0"))
        (link / name).write_bytes(data)
        if name in names:
            (many / name).write_bytes(data)
    (tmp_path / "main.c").write_text(
        "__attribute__((noreturn)) void _start(void) {\n"
        '  __asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall");\n'
        "  for (;;) {}\n}\n"
    )
    _gcc(
        *NOLIBC,
        "-o",
        str(many / "prog"),
        str(tmp_path / "main.c"),
        "-L",
        str(link),
        f"-Wl,--dynamic-linker={LOADER}",
        "-Wl,--no-as-needed",
        *[f"-l:{n}" for n in [*names, *image]],
    )
    args = [a for n in names for a in ("--library", f"{n}::/opt/many/{n}")]
    proc = hook(root, *args)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    proc = chroot(root, LOADER, "--list", "/opt/many/prog", env={"LD_DEBUG": "libs"})
    assert proc.returncode == 0, proc.stderr
    # every lookup is a cache hit: "search cache" directly followed by "trying file"
    # (a miss would go on to "search path=" the default directories)
    debug = [ln.split(":", 1)[-1].strip() for ln in proc.stderr.splitlines()]
    finds = [i for i, ln in enumerate(debug) if ln.startswith("find library=")]
    found = {debug[i].split("=", 1)[1].split(" ")[0].strip("[];") for i in finds}
    assert found >= {*names, *image}  # (and what the image's libraries need)
    misses = [
        debug[i]
        for i in finds
        if not (
            debug[i + 1].startswith("search cache=") and debug[i + 2].startswith("trying file=")
        )
    ]
    assert not misses, misses[:5]
    resolved = {}
    for ln in proc.stdout.splitlines():
        name, arrow, rest = ln.strip().partition(" => ")
        if arrow:
            resolved[name] = rest.split(" (")[0]
    assert {n: resolved.get(n) for n in names} == {n: f"/opt/many/{n}" for n in names}
    wrong = {n: resolved.get(n) for n, paths in image.items() if resolved.get(n) not in paths}
    assert not wrong


MUSL_LIB_C = '#include <stdio.h>\nvoid musl_hello(void) { puts("musl-ok"); }\n'
MUSL_PROG_C = "void musl_hello(void);\nint main(void) { musl_hello(); return 0; }\n"


def test_musl_image_is_left_working_and_nothing_is_said(tmp_path):
    """A musl root (Debian's musl: the loader is libc.so itself; it reads
    /etc/ld-musl-x86_64.path, never ld.so.cache): a musl program needing a library found
    only through that path file runs the same after the hook wrote its files."""
    libc = Path("/usr/lib/x86_64-linux-musl/libc.so")
    if shutil.which("musl-gcc") is None or not libc.exists():
        pytest.fail("musl-gcc is needed (scripts/setup installs musl-tools)", pytrace=False)
    root = tmp_path / "musl"
    for d in ("lib", "etc", "opt/musllib", "usr/bin"):
        (root / d).mkdir(parents=True)
    shutil.copy(libc, root / "lib/ld-musl-x86_64.so.1")
    (root / "etc/ld-musl-x86_64.path").write_text("/lib\n/opt/musllib\n")
    (tmp_path / "lib.c").write_text(MUSL_LIB_C)
    (tmp_path / "prog.c").write_text(MUSL_PROG_C)
    lib = root / "opt/musllib/libmusltest.so.1"
    for args in (
        [
            "-shared",
            "-fPIC",
            "-Wl,-soname,libmusltest.so.1",
            "-o",
            str(lib),
            str(tmp_path / "lib.c"),
        ],
        ["-o", str(root / "usr/bin/prog"), str(tmp_path / "prog.c"), str(lib)],
    ):
        subprocess.run(["musl-gcc", *args], check=True, capture_output=True)
    before = chroot(root, "/usr/bin/prog")
    assert (before.returncode, before.stdout) == (0, "musl-ok\n"), before.stderr
    proc = hook(
        root,
        "--library",
        f"{TEST_SONAME}::/usr/lib/x86_64-linux-gnu/{TEST_SONAME}",
        "--folder",
        "/usr/lib/x86_64-linux-gnu",
    )
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == "", proc
    assert (root / "etc/ld.so.cache").read_bytes().startswith(ldsocache.NEW_MAGIC)
    after = chroot(root, "/usr/bin/prog")
    assert (after.returncode, after.stdout, after.stderr) == (0, "musl-ok\n", "")
    assert (root / "etc/ld-musl-x86_64.path").read_text() == "/lib\n/opt/musllib\n"
