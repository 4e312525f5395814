"""glibc's ``/etc/ld.so.cache``: read every format images carry, write the new format.

The hook adds the injected driver libraries to a container's cache with this module
instead of running ldconfig (gpunode.hook.ldcache). The layouts (glibc
``sysdeps/generic/dl-cache.h``, all integers in the machine's byte order):

* old, ``ld.so-1.7.0``: magic (11 bytes, padded to 12), nlibs (uint32), then nlibs
  entries ``{int32 flags; uint32 key, value}``; key (the SONAME) and value (the path) are
  offsets of NUL-terminated strings counted from the end of the entry table. Written
  alone only by very old ldconfig; glibc < 2.32 wrote it as the first half of
  the *compat* format.
* compat (glibc < 2.32 default; Debian 10/11, Ubuntu 18.04/20.04): an old-format cache
  whose string table starts, aligned to 8, with a complete new-format cache (the loader
  looks for it there and uses it).
* new, ``glibc-ld.so.cache1.1`` (alone since glibc 2.32): a 48-byte header (magic and
  version, nlibs, len_strings, a flags byte giving the byte order, extension_offset,
  unused words), then nlibs entries ``{int32 flags; uint32 key, value; uint32 osversion;
  uint64 hwcap}``. String offsets are counted from the new-format header (also inside a
  compat file). Since glibc 2.33 ``extension_offset`` may point at ``{uint32 magic;
  uint32 count; {uint32 tag, flags, offset, size}[count]}``; it and the section offsets
  count from the start of the *file* (the loader's ``file_base``; the same place unless
  the file is compat, as glibc >= 2.33's ``ldconfig -c compat`` shows). Tag 0 is the
  generator string ("ldconfig (GNU libc) ..."), tag 1 the glibc-hwcaps subdirectories:
  an array of uint32 string offsets (string offsets: from the new header). An entry
  whose hwcap's upper word is exactly DL_CACHE_HWCAP_EXTENSION's names its subdirectory
  by the index in its lower word.

The loader binary-searches the entries with ``_dl_cache_libcmp`` (digit runs compared as
numbers), so entries are written in exactly ldconfig's order (``sort_key``). Anything that
does not parse raises CacheError; the caller then rebuilds from its own entries.

The file comes from a container image: hostile input read as root on the host. Reading it
costs memory and time in proportion to its size: each string offset is decoded once (an
entry reuses the bytes of an offset met before), a string is at most MAX_STRING bytes, the
entries at most MAX_ENTRIES, and the strings decoded in all at most STRING_BUDGET times the
file's size; past any of these the file is a CacheError like any other corrupt cache.
Sorting the entries for the new file costs in proportion to that too: a sort key is built
once per distinct SONAME (sort_entries), and what a key costs beyond a few C-level passes
over the name's bytes is its digit runs, which the parser bounds (one run per RUN_BYTES
bytes of the file, in all the distinct SONAMEs).

Only struct is imported: the hook imports this on every GPU container start.
"""

from __future__ import annotations

import struct

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
OLD_HEADER = 16  # magic padded to 12 + nlibs
OLD_ENTRY = 12
NEW_HEADER = 48
NEW_ENTRY = 24
ENDIAN_LITTLE, ENDIAN_BIG = 2, 3  # cache_file_new_flags_endian_*
EXTENSION_MAGIC = 0xEAA42174  # (uint32_t) -358342284
TAG_GENERATOR, TAG_GLIBC_HWCAPS = 0, 1
HWCAP_EXTENSION = 1 << 62  # DL_CACHE_HWCAP_EXTENSION
MAX_CACHE = 16 << 20  # far above any real cache (a full Debian desktop: ~200 KiB)
MAX_ENTRIES = 1 << 16  # a full Debian desktop lists ~3,000 libraries
MAX_STRING = 4096  # PATH_MAX: no SONAME or path the loader opens is longer
# Decoded string bytes per file byte. ldconfig (glibc >= 2.32) stores a SONAME as the tail
# of its path, so a real cache decodes up to about twice its string table; an image whose
# entries all point at distinct places of one long string would decode far more.
STRING_BUDGET = 4
# Digit runs in the distinct SONAMEs: one per RUN_BYTES bytes of the file (plus RUN_SLACK
# for a tiny file). A real cache has one per ~60 bytes (this host's: 630 runs in 36 KiB;
# "libfoo.so.1.2.3" has 4); each run costs the sort key a dozen steps in Python's maps,
# so 65,536 names of 2,048 one-digit runs each cost seconds, where the file is 1.5 MiB.
RUN_BYTES = 8
RUN_SLACK = 64
GENERATOR = b"gpunode"

FLAG_ELF_LIBC6 = 0x0003
# The cache flags of a 64-bit (or i386) glibc library per machine (`uname -m`), as glibc's
# ldconfig sets them from the ELF header and each loader's _dl_cache_check_flags accepts
# them (FLAG_ELF_LIBC6 | FLAG_<ARCH>_LIB64); byte order; whether C `char` is signed there
# (_dl_cache_libcmp compares chars). Other architectures encode their ABI (hard/soft float,
# NaN mode) in e_flags and are refused rather than guessed.
MACHINES: dict[str, tuple[int, str, bool]] = {
    "x86_64": (FLAG_ELF_LIBC6 | 0x0300, "<", True),  # FLAG_X8664_LIB64
    "aarch64": (FLAG_ELF_LIBC6 | 0x0A00, "<", False),  # FLAG_AARCH64_LIB64
    "ppc64le": (FLAG_ELF_LIBC6 | 0x0500, "<", False),  # FLAG_POWERPC_LIB64
    "s390x": (FLAG_ELF_LIBC6 | 0x0400, ">", False),  # FLAG_S390_LIB64
    "i686": (FLAG_ELF_LIBC6, "<", True),
    "i386": (FLAG_ELF_LIBC6, "<", True),
}


class CacheError(ValueError):
    """Not a cache this module can read (corrupt, truncated, unknown format)."""


def machine_info(machine: str) -> tuple[int, str, bool]:
    """(entry flags, struct byte order, signed char) for ``machine`` (``uname -m``)."""
    try:
        return MACHINES[machine]
    except KeyError:
        raise ValueError(
            f"no ld.so.cache flags known for architecture {machine!r}; "
            f"supported: {', '.join(MACHINES)}"
        ) from None


class Entry:
    """One cache entry. ``hwcaps``: the glibc-hwcaps subdirectory name of an extension
    entry (its hwcap is then rewritten on output), else None."""

    __slots__ = ("flags", "hwcap", "hwcaps", "osversion", "path", "soname")

    def __init__(
        self,
        soname: bytes,
        path: bytes,
        flags: int,
        hwcap: int = 0,
        osversion: int = 0,
        hwcaps: bytes | None = None,
    ) -> None:
        self.soname, self.path, self.flags = soname, path, flags
        self.hwcap, self.osversion, self.hwcaps = hwcap, osversion, hwcaps

    def __repr__(self) -> str:
        extra = f", hwcaps={self.hwcaps!r}" if self.hwcaps is not None else ""
        return f"Entry({self.soname!r}, {self.path!r}, {self.flags:#06x}{extra})"

    def astuple(self) -> tuple:
        return (self.soname, self.path, self.flags, self.hwcap, self.osversion, self.hwcaps)


# ------------------------------------------------------------------ order


# A name's bytes as C's char orders them (signed: -128 -> 0, 0 -> 128), except that digits
# map to what the terminating NUL maps to: no byte of a name is NUL, so that value marks
# the digits alone, and splitting on it leaves the non-digit segments.
_SEP = {True: "\x80", False: "\0"}
_KEYMAP = {
    signed: bytes(
        ord(_SEP[signed]) if 48 <= c <= 57 else ((c + 128) & 0xFF if signed else c)
        for c in range(256)
    )
    for signed in (True, False)
}
_DIGITS_ONLY = bytes(c if 48 <= c <= 57 else 32 for c in range(256))  # non-digits -> space
_DIGIT_MASK = bytes(49 if 48 <= c <= 57 else 48 for c in range(256))  # b"1" digit else b"0"


def run_value(run: bytes) -> int:
    """The value a digit run has in ``_dl_cache_libcmp``: accumulated digit by digit in a
    C int, so modulo 2**32 (returned unsigned). Computed 18 digits at a time: a run of any
    length costs time in proportion to it, and no int of more than 18 digits is parsed
    (Python refuses int() of more than 4,300 digits)."""
    if len(run) <= 18:
        return int(run) & 0xFFFFFFFF
    v = 0
    for i in range(0, len(run), 18):
        chunk = run[i : i + 18]
        v = (v * 10 ** len(chunk) + int(chunk)) & 0xFFFFFFFF
    return v


def libcmp_key(name: bytes, signed_char: bool = True) -> str:
    """A sort key ordering names as glibc's ``_dl_cache_libcmp`` does. That function
    walks both names: a digit run is one number (accumulated in a C int, which wraps for
    runs over 9 digits, as here) and is greater than any non-digit; other bytes compare
    as C ``char`` values, the terminating NUL included (so with a signed char, byte 0xff
    sorts before the end of a name). The key: each non-digit byte as one code point in
    its char order (0-255), each digit run as three code points from U+0100 (above every
    byte; its signed value plus 2**31 in 12+10+10 bits), the NUL at the end.

    Cost: the hook sorts a whole image cache on every GPU container start, and the names
    come from the image. No step is per byte in Python: the segments and runs are cut by
    bytes.translate and split; Python steps once per digit run, which the parser bounds
    (RUN_BYTES) in all the distinct names. A key stays within U+1FFF (two bytes per code point, never four) and
    holds at most two code points per byte of the name (a one-digit run and the non-digit
    after it: two bytes, four code points): at most four bytes of key per byte of name."""
    sep = _SEP[signed_char]
    chars = name.translate(_KEYMAP[signed_char]).decode("latin-1")
    if sep not in chars:
        return chars + sep
    runs = name.translate(_DIGITS_ONLY).split()
    segs = chars.split(sep)  # one per digit: the segments, "" between a run's digits
    if len(segs) != len(runs) + 1 or "" in segs:
        segs = list(filter(None, segs))  # the non-digit segments, in order
        if 48 <= name[0] <= 57:
            segs.insert(0, "")  # the name starts with a run
        if len(segs) == len(runs):
            segs.append("")  # and ends with one
    out = []
    for seg, run in zip(segs, runs):  # noqa: B905 (segs: one more)
        # _int32(v) + 2**31 of the unsigned 32-bit value v: its top bit flipped
        u = ((int(run) if len(run) <= 9 else run_value(run)) & 0xFFFFFFFF) ^ 0x80000000
        out += (seg, chr(0x100 + (u >> 20)), chr(0x100 + ((u >> 10) & 0x3FF)))
        out.append(chr(0x100 + (u & 0x3FF)))
    out += (segs[-1], sep)
    return "".join(out)


def libcmp(a: bytes, b: bytes, signed_char: bool = True) -> int:
    """-1, 0 or 1: the sign of ``_dl_cache_libcmp(a, b)``."""
    ka, kb = libcmp_key(a, signed_char), libcmp_key(b, signed_char)
    return (ka > kb) - (ka < kb)


def sort_entries(entries: list[Entry], signed_char: bool = True) -> list[Entry]:
    """Entries in the order of ldconfig's ``compare()`` (cache.c): by name descending
    under _dl_cache_libcmp, then flags descending, glibc-hwcaps entries first (by
    subdirectory name, strcmp), then legacy hwcap bit count, hwcap and osversion, all
    descending. Three stable sorts, least significant key first."""

    def legacy(e: Entry) -> tuple:
        if e.hwcaps is not None:
            return (0, 0, 0)
        return (bin(e.hwcap).count("1"), e.hwcap, e.osversion)

    out = list(entries)
    if any(e.hwcap or e.osversion or e.hwcaps is not None for e in out):
        out.sort(key=legacy, reverse=True)
        out.sort(key=lambda e: (0, e.hwcaps) if e.hwcaps is not None else (1, b""))
    # One key per distinct name, not per entry: this is what keeps sorting an image's cache
    # in proportion to its size. 65,536 entries may name one 4,095-byte SONAME; the distinct
    # names are what the parser decoded within STRING_BUDGET times the file (so are their
    # keys, at most four bytes per name byte: see libcmp_key), their digit runs within its
    # run budget. Entries of one name share one key object: compared by identity.
    keys = {name: libcmp_key(name, signed_char) for name in {e.soname for e in out}}
    out.sort(key=lambda e: (keys[e.soname], e.flags), reverse=True)
    return out


# ------------------------------------------------------------------ reading


class _Strings:
    """The NUL-terminated strings of one cache file, each offset decoded once and the
    bytes decoded in all bounded by the file's size (see the module docstring)."""

    __slots__ = ("base", "budget", "data", "seen")

    def __init__(self, data: bytes, base: int) -> None:
        self.data, self.base = data, base
        self.budget = STRING_BUDGET * len(data)
        self.seen: dict[int, bytes] = {}

    def at(self, off: int) -> bytes:
        found = self.seen.get(off)
        if found is not None:
            return found
        data = self.data
        start = self.base + off
        if start >= len(data):
            raise CacheError(f"string offset {off} outside the file")
        end = data.find(b"\0", start, start + MAX_STRING + 1)
        if end < 0:
            if data.find(b"\0", start) < 0:
                raise CacheError(f"unterminated string at {start}")
            raise CacheError(f"string at {start} longer than {MAX_STRING} bytes")
        self.budget -= end - start + 1
        if self.budget < 0:
            raise CacheError(f"strings decode to more than {STRING_BUDGET} times the file")
        found = self.seen[off] = data[start:end]
        return found


def _parse_new(data: bytes, base: int, end: str) -> list[Entry]:
    if len(data) - base < NEW_HEADER:
        raise CacheError("truncated new-format header")
    nlibs, _len_strings, flags, ext_off = struct.unpack_from(end + "IIB3xI", data, base + 20)
    if flags not in (0, ENDIAN_LITTLE if end == "<" else ENDIAN_BIG):
        raise CacheError(f"byte order flag {flags} is not this machine's")
    if nlibs > (len(data) - base - NEW_HEADER) // NEW_ENTRY:
        raise CacheError(f"{nlibs} entries do not fit in the file")
    _check_count(nlibs)
    strings = _Strings(data, base)
    hwcaps = _hwcaps_names(data, strings, end, ext_off) if ext_off else None
    at = strings.at
    out = []
    for fl, key, value, osv, hwcap in struct.iter_unpack(
        end + "iIIIQ", data[base + NEW_HEADER : base + NEW_HEADER + nlibs * NEW_ENTRY]
    ):
        name = None
        if hwcap >> 32 == HWCAP_EXTENSION >> 32:
            if hwcaps is None or (hwcap & 0xFFFFFFFF) >= len(hwcaps):
                continue  # its subdirectory is not known (anymore): the loader skips it too
            name = hwcaps[hwcap & 0xFFFFFFFF]
        out.append(Entry(at(key), at(value), fl, hwcap, osv, name))
    return _runs_checked(out, len(data))


def _runs_checked(entries: list[Entry], size: int) -> list[Entry]:
    """``entries``, once the digit runs of their distinct SONAMEs are found within one per
    RUN_BYTES bytes of the file (the sort's cost, see RUN_BYTES). Counted in C: the names
    joined by NUL (no digit), digits mapped to b"1" and the rest to b"0", a run being
    where b"01" occurs (or the start)."""
    mask = b"\0".join({e.soname for e in entries}).translate(_DIGIT_MASK)
    if mask.count(b"01") + mask.startswith(b"1") > RUN_SLACK + size // RUN_BYTES:
        raise CacheError(
            f"its names hold more than one digit run per {RUN_BYTES} bytes of the file"
        )
    return entries


def _check_count(nlibs: int) -> None:
    if nlibs > MAX_ENTRIES:
        raise CacheError(f"{nlibs} entries, more than the {MAX_ENTRIES} accepted")


def _hwcaps_names(data: bytes, strings: _Strings, end: str, ext_off: int) -> list[bytes] | None:
    """The glibc-hwcaps subdirectory names of the extension section, or None when there
    is none. Only that section is kept: the generator string is ours on output, and a
    section with an unknown tag is dropped, because its contents may hold offsets this
    module cannot know how to relocate (keeping it verbatim could point them anywhere)."""
    start = ext_off  # from the file's start, as section offsets
    if ext_off % 4 or start + 8 > len(data):
        raise CacheError("extension offset outside the file")
    magic, count = struct.unpack_from(end + "II", data, start)
    if magic != EXTENSION_MAGIC:
        return None  # as the loader: no extension
    if count > (len(data) - start - 8) // 16:
        raise CacheError("extension sections do not fit in the file")
    names = None
    for i in range(count):
        tag, _fl, off, size = struct.unpack_from(end + "IIII", data, start + 8 + 16 * i)
        if tag != TAG_GLIBC_HWCAPS:
            continue
        if off % 4 or size % 4 or off + size > len(data):
            raise CacheError("glibc-hwcaps section outside the file")
        _check_count(size // 4)
        offs = struct.unpack_from(f"{end}{size // 4}I", data, off)
        names = [strings.at(o) for o in offs]
    return names


def parse(data: bytes, machine: str = "x86_64") -> list[Entry]:
    """The entries of a cache file in any format (in file order). Raises CacheError."""
    _, end, _ = machine_info(machine)
    if len(data) > MAX_CACHE:
        raise CacheError(f"larger than {MAX_CACHE} bytes")
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0, end)
    if not data.startswith(OLD_MAGIC) or len(data) < OLD_HEADER:
        raise CacheError("not an ld.so.cache (unknown magic)")
    (nlibs,) = struct.unpack_from(end + "I", data, 12)
    table_end = OLD_HEADER + nlibs * OLD_ENTRY
    if table_end > len(data):
        raise CacheError(f"{nlibs} entries do not fit in the file")
    new = (table_end + 7) & ~7
    if data.startswith(NEW_MAGIC, new):
        return _parse_new(data, new, end)
    _check_count(nlibs)
    at = _Strings(data, table_end).at
    entries = [
        Entry(at(key), at(value), fl)
        for fl, key, value in struct.iter_unpack(end + "iII", data[OLD_HEADER:table_end])
    ]
    return _runs_checked(entries, len(data))


# ------------------------------------------------------------------ writing


def build(entries: list[Entry], machine: str = "x86_64") -> bytes:
    """A new-format cache (every glibc loader since 2.x reads it) of ``entries``, sorted
    as ldconfig sorts them, with a glibc-hwcaps section when an entry needs one."""
    _, end, signed_char = machine_info(machine)
    entries = sort_entries(entries, signed_char)
    subdirs = sorted({e.hwcaps for e in entries if e.hwcaps is not None})
    index = {name: i for i, name in enumerate(subdirs)}
    strings: dict[bytes, int] = {}
    pool = bytearray()
    strings_base = NEW_HEADER + NEW_ENTRY * len(entries)

    def offset(s: bytes) -> int:
        off = strings.get(s)
        if off is None:
            off = strings[s] = strings_base + len(pool)
            pool.extend(s + b"\0")
        return off

    table = bytearray()
    for e in entries:
        hwcap = e.hwcap if e.hwcaps is None else HWCAP_EXTENSION | index[e.hwcaps]
        table += struct.pack(
            end + "iIIIQ", e.flags, offset(e.soname), offset(e.path), e.osversion, hwcap
        )
    hwcap_offs = [offset(s) for s in subdirs]
    gen_off = strings_base + len(pool)
    pool += GENERATOR
    ext_off = (strings_base + len(pool) + 7) & ~7
    pool += bytes(ext_off - strings_base - len(pool))
    sections = [(TAG_GENERATOR, gen_off, len(GENERATOR))]
    count = 2 if subdirs else 1
    data_off = ext_off + 8 + 16 * count
    if subdirs:
        sections.append((TAG_GLIBC_HWCAPS, data_off, 4 * len(subdirs)))
    ext = struct.pack(end + "II", EXTENSION_MAGIC, count)
    ext += b"".join(struct.pack(end + "IIII", tag, 0, off, size) for tag, off, size in sections)
    ext += struct.pack(f"{end}{len(hwcap_offs)}I", *hwcap_offs)
    header = NEW_MAGIC + struct.pack(
        end + "IIB3xI12x",
        len(entries),
        len(pool),
        ENDIAN_LITTLE if end == "<" else ENDIAN_BIG,
        ext_off,
    )
    return bytes(header + table + pool + ext)


def merge(existing: list[Entry], added: list[Entry]) -> list[Entry]:
    """``existing`` without the entries ``added`` replaces (same SONAME and flags, any
    hwcap: the injected library must be the one found), plus ``added``."""
    replaced = {(e.soname, e.flags) for e in added}
    return [e for e in existing if (e.soname, e.flags) not in replaced] + added
