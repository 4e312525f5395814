"""gpunode.util.ldsocache against glibc itself: the host's ldconfig writes the caches
(new, compat and old formats, glibc-hwcaps entries) and reads ours back (``ldconfig -p``);
_dl_cache_libcmp is checked against a C copy of glibc's, compiled with both char
signednesses. Real images and their own loaders: tests/integration/test_ldcache_images.py.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from gpunode.util import ldsocache as L

from ..helpers import cc

LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"
X86 = 0x0303

# Names whose order trips a plain string sort: numeric digit runs, prefixes, digits
# mid-way, leading zeros, a run longer than an int.
TRICKY = [
    "libfoo.so.9",
    "libfoo.so.10",
    "libfoo.so.1.2",
    "libfoo.so.1.10",
    "libfoo.so",
    "libfoo.so.1",
    "libfoo2.so.1",
    "libfoo10.so.1",
    "libfoo.so.1a",
    "libfo.so.1",
    "libfoox.so.1",
    "lib2x.so.3",
    "libGL.so.1",
    "libgl.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ml.so.535.261.03",
]

LIBCMP_C = r"""
#include <stdio.h>
#include <string.h>
/* glibc elf/dl-cache.c (_dl_cache_libcmp), as it is */
static int libcmp(const char *p1, const char *p2) {
  while (*p1 != '\0') {
    if (*p1 >= '0' && *p1 <= '9') {
      if (*p2 >= '0' && *p2 <= '9') {
        int val1, val2;
        val1 = *p1++ - '0';
        val2 = *p2++ - '0';
        while (*p1 >= '0' && *p1 <= '9') val1 = (int)((unsigned)val1 * 10 + *p1++ - '0');
        while (*p2 >= '0' && *p2 <= '9') val2 = (int)((unsigned)val2 * 10 + *p2++ - '0');
        if (val1 != val2) return val1 < val2 ? -1 : 1;
      } else
        return 1;
    } else if (*p2 >= '0' && *p2 <= '9')
      return -1;
    else if (*p1 != *p2)
      return *p1 - *p2;
    else {
      ++p1;
      ++p2;
    }
  }
  return *p1 - *p2;
}
int main(void) {
  char a[512], b[512];
  while (fgets(a, sizeof a, stdin) && fgets(b, sizeof b, stdin)) {
    a[strcspn(a, "\n")] = 0;
    b[strcspn(b, "\n")] = 0;
    int r = libcmp(a, b);
    printf("%d\n", (r > 0) - (r < 0));
  }
  return 0;
}
"""


def _names(rng: random.Random, n: int) -> list[bytes]:
    alphabet = b"lib.so-_0123456789xyzAZ\x7f\x80\xfe\xff"
    out = [n.encode() for n in TRICKY]
    for _ in range(n):
        name = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.1:
            name += b"4294967301"  # wraps in a C int
        out.append(name)
    return out


@pytest.mark.parametrize("signedness", ["-fsigned-char", "-funsigned-char"])
def test_libcmp_is_glibcs(tmp_path, signedness):
    prog = cc(tmp_path / "libcmp", LIBCMP_C, signedness)
    rng = random.Random(7)
    names = _names(rng, 400)
    pairs = [(a, b) for a in names[:40] for b in names[:40]]
    pairs += [(rng.choice(names), rng.choice(names)) for _ in range(3000)]
    # mostly-equal pairs: the same name with one byte changed
    for a in names[:200]:
        if a:
            i = rng.randrange(len(a))
            pairs.append((a, a[:i] + bytes([rng.choice(b"09.a\xff")]) + a[i + 1 :]))
    stdin = b"".join(a + b"\n" + b + b"\n" for a, b in pairs)
    got = subprocess.run([prog], input=stdin, capture_output=True, check=True).stdout.split()
    signed = signedness == "-fsigned-char"
    want = [str(L.libcmp(a, b, signed)).encode() for a, b in pairs]
    bad = [(a, b, w, g) for (a, b), w, g in zip(pairs, want, got, strict=True) if w != g]
    assert not bad, bad[:5]


def test_libcmp_examples():
    assert L.libcmp(b"libfoo.so.10", b"libfoo.so.9") == 1  # numbers, not strings
    assert L.libcmp(b"libfoo.so.1.10", b"libfoo.so.1.2") == 1
    assert L.libcmp(b"libfoo.so.01", b"libfoo.so.1") == 0  # equal as numbers
    assert L.libcmp(b"libfoo.so", b"libfoo.so.1") == -1  # a prefix first
    assert L.libcmp(b"libfoo2.so", b"libfoo.so") == 1  # a digit beats any other char
    assert L.libcmp(b"lib\xff", b"lib") == -1  # as a signed char, 0xff < NUL
    assert L.libcmp(b"lib\xff", b"lib", signed_char=False) == 1


# ------------------------------------------------------------------ real ldconfig


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    """A root for ``ldconfig -r`` (so that it writes nothing on the host, not even its aux
    cache): /libs holds tiny libraries with the TRICKY SONAMEs and glibc-hwcaps
    subdirectories with two of them; /etc/ld.so.conf names /libs."""
    d = tmp_path_factory.mktemp("ldso")
    src = d / "lib.c"
    src.write_text("int gpunode_test_symbol(void) { return 1; }\n")
    libs = d / "libs"
    for sub in ("", "glibc-hwcaps/x86-64-v3", "glibc-hwcaps/x86-64-v2"):
        (libs / sub).mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(TRICKY):
        out = libs / (name if name.count(".so") else name + ".so")
        if shutil.which("gcc") is None:
            pytest.skip("gcc not available")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(out), str(src)],
            check=True,
        )
        if i < 2:
            shutil.copy(out, libs / "glibc-hwcaps/x86-64-v3" / out.name)
            shutil.copy(out, libs / "glibc-hwcaps/x86-64-v2" / out.name)
    (d / "etc").mkdir()
    (d / "etc/ld.so.conf").write_text("/libs\n")
    return d


def _ldconfig_cache(libdir: Path, fmt: str) -> bytes:
    out = libdir / f"cache.{fmt}"
    proc = subprocess.run(
        [LDCONFIG, "-X", "-c", fmt, "-r", str(libdir), "-C", f"/cache.{fmt}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"host ldconfig cannot write the {fmt} format: {proc.stderr.strip()}")
    return out.read_bytes()


def _listing(cache: bytes, tmp_path: Path) -> list[str]:
    """The host ldconfig's own reading of a cache: its entries, in file order."""
    f = tmp_path / "listed.cache"
    f.write_bytes(cache)
    out = subprocess.run(
        [LDCONFIG, "-p", "-C", str(f)], capture_output=True, text=True, check=True
    ).stdout
    return [ln.strip() for ln in out.splitlines() if "=>" in ln]


def _fields(entries: list[L.Entry]) -> list[tuple]:
    return [e.astuple() for e in entries]


@pytest.mark.parametrize("fmt", ["new", "compat", "old"])
def test_parse_what_ldconfig_wrote(libdir, tmp_path, fmt):
    data = _ldconfig_cache(libdir, fmt)
    entries = L.parse(data)
    names = {e.soname.decode() for e in entries}
    assert set(TRICKY) <= names
    assert all(e.flags == X86 for e in entries if e.soname.decode() in TRICKY)
    paths = {e.path.decode() for e in entries}
    assert "/libs/libfoo.so.10" in paths
    if fmt != "old":  # the old format has no hwcaps
        # (compat with hwcaps is only what glibc >= 2.33 writes on request; its ldconfig -p
        # misreads the names, its loader and this module take them from the new header)
        hw = sorted((e.hwcaps, e.soname) for e in entries if e.hwcaps is not None)
        assert hw == [
            (b"x86-64-v2", b"libfoo.so.10"),
            (b"x86-64-v2", b"libfoo.so.9"),
            (b"x86-64-v3", b"libfoo.so.10"),
            (b"x86-64-v3", b"libfoo.so.9"),
        ]
    # our writer keeps the very order ldconfig chose, from any start (the old format has
    # the hwcaps copies as plain entries: ties, in whatever order qsort left them)
    shuffled = entries[:]
    random.Random(1).shuffle(shuffled)
    key = _fields if fmt != "old" else lambda es: [(e.soname, e.flags) for e in es]
    assert key(L.sort_entries(shuffled)) == key(entries)


def test_build_is_read_by_ldconfig_exactly_as_its_own(libdir, tmp_path):
    """Our new-format file of ldconfig's own entries: ldconfig -p lists the same entries
    (hwcaps included) in the same order as from its own file."""
    data = _ldconfig_cache(libdir, "new")
    entries = L.parse(data)
    random.Random(2).shuffle(entries)
    ours = L.build(entries)
    assert _listing(ours, tmp_path) == _listing(data, tmp_path)
    assert _fields(L.parse(ours)) == _fields(L.parse(data))  # a round trip


def test_compat_and_new_halves_agree(libdir):
    new = L.parse(_ldconfig_cache(libdir, "new"))
    compat = L.parse(_ldconfig_cache(libdir, "compat"))
    old = L.parse(_ldconfig_cache(libdir, "old"))
    assert _fields(compat) == _fields(new)
    # the old format has the hwcaps copies as plain entries
    assert sorted((e.soname, e.path) for e in old) == sorted((e.soname, e.path) for e in new)


def test_merge_replaces_same_soname_and_flags(libdir, tmp_path):
    data = _ldconfig_cache(libdir, "new")
    ours = L.Entry(b"libfoo.so.10", b"/usr/lib/x86_64-linux-gnu/libfoo.so.10", X86)
    other_abi = L.Entry(b"libfoo.so.10", b"/usr/lib32/libfoo.so.10", 0x0003)
    merged = L.merge(L.parse(data), [ours, other_abi])
    out = L.parse(L.build(merged))
    foo = [(e.path, e.flags, e.hwcaps) for e in out if e.soname == b"libfoo.so.10"]
    # the image's copy and its hwcaps variants are gone; the other ABI's entry is kept
    assert foo == [(ours.path, X86, None), (other_abi.path, 0x0003, None)]
    listed = [ln for ln in _listing(L.build(merged), tmp_path) if ln.startswith("libfoo.so.10 ")]
    assert listed == [
        "libfoo.so.10 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libfoo.so.10",
        "libfoo.so.10 (libc6) => /usr/lib32/libfoo.so.10",
    ]


def _with_extra_section(data: bytes, tag: int) -> bytes:
    """``data`` (new format) with one more extension section of ``tag``, pointing at
    the old extension data (an offset this module cannot know the meaning of)."""
    ext_off = struct.unpack_from("<I", data, 32)[0]
    magic, count = struct.unpack_from("<II", data, ext_off)
    assert magic == L.EXTENSION_MAGIC
    sections = [struct.unpack_from("<IIII", data, ext_off + 8 + 16 * i) for i in range(count)]
    sections.append((tag, 0, ext_off, 8))
    new_off = (len(data) + 7) & ~7
    ext = struct.pack("<II", magic, len(sections))
    ext += b"".join(struct.pack("<IIII", *s) for s in sections)
    out = bytearray(data + bytes(new_off - len(data)) + ext)
    struct.pack_into("<I", out, 32, new_off)
    return bytes(out)


def test_unknown_extension_section_is_dropped_hwcaps_kept(libdir, tmp_path):
    data = _with_extra_section(_ldconfig_cache(libdir, "new"), 99)
    entries = L.parse(data)
    assert sum(e.hwcaps is not None for e in entries) == 4
    ours = L.build(entries)
    ext_off = struct.unpack_from("<I", ours, 32)[0]
    _, count = struct.unpack_from("<II", ours, ext_off)
    tags = [struct.unpack_from("<I", ours, ext_off + 8 + 16 * i)[0] for i in range(count)]
    assert tags == [L.TAG_GENERATOR, L.TAG_GLIBC_HWCAPS]
    listed = _listing(ours, tmp_path)
    assert any('hwcap: "x86-64-v3"' in ln and ln.startswith("libfoo.so.9 ") for ln in listed)
    assert listed == _listing(_ldconfig_cache(libdir, "new"), tmp_path)


def test_hwcaps_offsets_survive_relayout(libdir, tmp_path):
    """Adding entries moves every string: the glibc-hwcaps section's string offsets are
    rewritten, as ldconfig -p's hwcap names show."""
    entries = L.parse(_ldconfig_cache(libdir, "new"))
    added = [
        L.Entry(f"libzz{i}.so.1".encode(), f"/opt/zz/libzz{i}.so.1".encode(), X86)
        for i in range(50)
    ]
    listed = _listing(L.build(L.merge(entries, added)), tmp_path)
    assert sum('hwcap: "x86-64-v2"' in ln for ln in listed) == 2
    assert sum('hwcap: "x86-64-v3"' in ln for ln in listed) == 2
    assert "libzz7.so.1 (libc6,x86-64) => /opt/zz/libzz7.so.1" in listed


def test_empty_and_ours_only(tmp_path):
    data = L.build([L.Entry(b"libcuda.so.1", b"/usr/lib/x86_64-linux-gnu/libcuda.so.1", X86)])
    assert _listing(data, tmp_path) == [
        "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
    ]
    assert L.parse(L.build([])) == []


# ------------------------------------------------------------------ corruption


def test_truncated_or_flipped_caches_raise_cache_error_only(libdir):
    data = _ldconfig_cache(libdir, "compat")
    for cut in range(len(data)):
        with contextlib.suppress(L.CacheError):
            L.parse(data[:cut])
    rng = random.Random(3)
    for _ in range(3000):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(buf))
            buf[pos] = rng.randrange(256)
        try:
            entries = L.parse(bytes(buf))
        except L.CacheError:
            continue
        L.build(entries)  # whatever parsed can be written back


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "unknown magic"),
        (b"\x7fELF" + bytes(100), "unknown magic"),
        (L.NEW_MAGIC + bytes(10), "truncated new-format header"),
        (L.NEW_MAGIC + struct.pack("<IIB3xI12x", 1000, 0, 2, 0), "entries do not fit"),
        (L.NEW_MAGIC + struct.pack("<IIB3xI12x", 0, 0, 3, 0), "byte order"),
        (L.OLD_MAGIC + b"\0" + struct.pack("<I", 5), "entries do not fit"),
        (b"glibc-ld.so.cache1.1" + bytes(L.MAX_CACHE), "larger than"),
    ],
)
def test_bad_caches_name_the_problem(data, why):
    with pytest.raises(L.CacheError, match=why):
        L.parse(data)


def test_string_offsets_outside_the_file(tmp_path):
    data = bytearray(L.build([L.Entry(b"libx.so.1", b"/x/libx.so.1", X86)]))
    struct.pack_into("<I", data, L.NEW_HEADER + 4, len(data) + 10)  # the key
    with pytest.raises(L.CacheError, match="outside the file"):
        L.parse(bytes(data))
    header = L.NEW_MAGIC + struct.pack("<IIB3xI12x", 1, 3, 2, 0)
    entry = struct.pack("<iIIIQ", X86, 72, 72, 0, 0)
    with pytest.raises(L.CacheError, match="unterminated string at 72"):
        L.parse(header + entry + b"abc")


def test_unknown_machine_is_refused_by_name():
    with pytest.raises(ValueError, match="'riscv64'; supported: x86_64, aarch64"):
        L.build([], "riscv64")
    data = L.build([L.Entry(b"libx.so.1", b"/x/libx.so.1", 0x0A03)], "aarch64")
    assert L.parse(data, "aarch64")[0].flags == 0x0A03
    big = L.build([L.Entry(b"libx.so.1", b"/x/libx.so.1", 0x0403)], "s390x")
    assert big[20:24] == b"\0\0\0\1" and L.parse(big, "s390x")[0].path == b"/x/libx.so.1"
    with pytest.raises(L.CacheError, match="byte order"):
        L.parse(big, "x86_64")


# ------------------------------------------------------------------ hostile sizes


def bomb(size: int, distinct: bool) -> bytes:
    """A new-format cache of about ``size`` bytes whose entries all point into one long
    string: at its start (``distinct=False``: one string of half the file) or each at
    another byte of a 4,000-byte string (each a different, short-enough string)."""
    nlibs = size // 2 // L.NEW_ENTRY
    strings = L.NEW_HEADER + nlibs * L.NEW_ENTRY
    text = b"l" * (4000 if distinct else size - strings - 1) + b"\0"
    entries = b"".join(
        struct.pack("<iIIIQ", X86, strings + (i % 4000 if distinct else 0), strings, 0, 0)
        for i in range(nlibs)
    )
    header = L.NEW_MAGIC + struct.pack("<IIB3xI12x", nlibs, len(text), 2, 0)
    return header + entries + text


@pytest.mark.parametrize(
    ("distinct", "why"),
    [(False, "longer than 4096 bytes"), (True, "more than 4 times the file")],
    ids=["one-long-string", "distinct-offsets"],
)
def test_memory_bomb_is_refused_in_proportion_to_its_size(distinct, why):
    """Before the bounds, a 1 MiB cache of entries pointing at one long string copied it
    per entry (1.2 GiB RSS measured); now the parse fails after decoding at most
    STRING_BUDGET times the file, with tracemalloc's peak to show it."""
    import tracemalloc

    data = bomb(1 << 20, distinct)
    tracemalloc.start()
    try:
        with pytest.raises(L.CacheError, match=why):
            L.parse(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (L.STRING_BUDGET + 2) * len(data), peak


def test_each_offset_is_decoded_once():
    data = L.build([L.Entry(b"libx.so.%d" % i, b"/x/libx.so.1", X86) for i in range(50)])
    entries = L.parse(data)
    assert len({id(e.path) for e in entries}) == 1  # one bytes object for one offset


def test_entry_count_is_bounded():
    header = L.NEW_MAGIC + struct.pack("<IIB3xI12x", L.MAX_ENTRIES + 1, 0, 2, 0)
    data = header + bytes((L.MAX_ENTRIES + 1) * L.NEW_ENTRY)
    with pytest.raises(L.CacheError, match=f"more than the {L.MAX_ENTRIES} accepted"):
        L.parse(data)
    old = L.OLD_MAGIC + b"\0" + struct.pack("<I", L.MAX_ENTRIES + 1)
    with pytest.raises(L.CacheError, match="accepted"):
        L.parse(old + bytes((L.MAX_ENTRIES + 1) * L.OLD_ENTRY + 8))


def test_a_digit_run_of_any_length_sorts_as_glibc_accumulates_it():
    """Python refuses int() of more than 4,300 digits; glibc accumulates a run in a C int
    (modulo 2**32) whatever its length."""
    run = b"7" * 5000
    # 77...7 (5,000 sevens) modulo 2**32, without ever building the 5,000-digit int
    want = sum(7 * pow(10, i, 1 << 32) for i in range(5000)) % (1 << 32)
    assert L.run_value(run) == want
    assert L.run_value(b"4294967301") == 5 and L.run_value(b"0" * 40 + b"12") == 12
    # the run compares as the number it wraps to, as glibc's loader compares it
    assert L.libcmp(b"libz.so." + run, b"libz.so.%d" % want) == 0
    entries = [
        L.Entry(b"libz.so." + run, b"/l/libz.so.7", X86),
        L.Entry(b"libz.so.1", b"/l/libz.so.1", X86),
    ]
    assert [e.soname for e in L.sort_entries(entries)] == [b"libz.so." + run, b"libz.so.1"]
    # such a SONAME cannot come from an image's cache any more: longer than a string may be
    with pytest.raises(L.CacheError, match="longer than 4096 bytes"):
        L.parse(L.build(entries))


SORT_BOMBS = ["one-name-digit-runs", "one-name-ucs4", "distinct-digit-runs", "distinct-names"]


def sort_bomb(kind: str) -> bytes:
    """A new-format cache built to make sorting its entries cost (the review's ld.so.cache
    sort finding); each a valid cache up to the parser's bounds:

    * one-name-digit-runs: 65,536 entries naming one 4,095-byte SONAME of one-digit runs
      (``1a1a...``, 2,048 runs);
    * one-name-ucs4: the same with runs whose values are near 2**32 (a key of one code
      point per run above U+FFFF would make it four bytes per code point);
    * distinct-digit-runs: 1,600 distinct names of 4,092-4,095 bytes, of one-digit runs
      after an 8-digit number (400 strings, four offsets into each), within the string
      budget;
    * distinct-names: 65,536 distinct 91-byte names of four runs each, well within the
      string and run budgets (the most work a cache the parser accepts can ask for)."""
    if kind.startswith("one-name"):
        unit = b"1a" if kind == "one-name-digit-runs" else b"4294967295a"
        text = (unit * (4095 // len(unit) + 1))[:4095] + b"\0"
        offsets = [0] * (L.MAX_ENTRIES - 1)  # and the hook adds one
    elif kind == "distinct-digit-runs":
        text = b"".join(b"%08da" % c + b"1a" * 2042 + b"1\0" for c in range(400))
        offsets = [4096 * c + i for c in range(400) for i in range(4)]
    else:
        text = b"".join(b"%08d" % i + b"x" * 78 + b"1a2b3\0" for i in range(L.MAX_ENTRIES - 1))
        offsets = [92 * i for i in range(L.MAX_ENTRIES - 1)]
    nlibs = len(offsets)
    strings = L.NEW_HEADER + nlibs * L.NEW_ENTRY
    entries = b"".join(
        struct.pack("<iIIIQ", X86, strings + off, strings + off, 0, 0) for off in offsets
    )
    return L.NEW_MAGIC + struct.pack("<IIB3xI12x", nlibs, len(text), 2, 0) + entries + text
