"""What gpunode needs from ELF files, read with struct (no ``re``, no third-party code):
a shared library's DT_SONAME, read from its dynamic segment as the loader does
(DT_STRTAB is a virtual address, mapped to a file offset through the PT_LOAD segments).
Discovery records it so that the hook can create the SONAME links and the ld.so.cache
entries itself.
"""

from __future__ import annotations

import os
import struct

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_SONAME = 0, 5, 14
MAX_TABLE = 1 << 20  # program header table / dynamic segment: far above any real file
MAX_NAME = 255


class ElfError(ValueError):
    """Not an ELF file this module can read."""


def _program_headers(
    fd: int, max_table: int = MAX_TABLE
) -> tuple[str, bool, list[tuple[int, int, int, int]]]:
    """(endianness, is 64-bit, [(p_type, p_offset, p_vaddr, p_filesz)])."""
    head = os.pread(fd, 64, 0)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise ElfError("not an ELF file")
    is64 = head[4] == 2
    end = "<" if head[5] == 1 else ">"
    if is64:
        if len(head) < 64:
            raise ElfError("truncated ELF header")
        (phoff,) = struct.unpack_from(end + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
        fmt, need = end + "IIQQQQ", 40  # type, flags, offset, vaddr, paddr, filesz
    else:
        (phoff,) = struct.unpack_from(end + "I", head, 28)
        phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
        fmt, need = end + "IIIIII", 24  # type, offset, vaddr, paddr, filesz, memsz
    if phnum and (phentsize < need or phentsize * phnum > max_table):
        raise ElfError("bad program header table")
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        raise ElfError("truncated program header table")
    out = []
    for i in range(phnum):
        f = struct.unpack_from(fmt, table, i * phentsize)
        if is64:
            out.append((f[0], f[2], f[3], f[5]))
        else:
            out.append((f[0], f[1], f[2], f[4]))
    return end, is64, out


def soname(path: str) -> str | None:
    """DT_SONAME of the shared library at ``path``; None when it has none.

    Raises OSError or ElfError for unreadable or malformed files. A SONAME that is not a
    plain file name (a slash, NUL, "..", control characters) counts as none.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return soname_fd(fd)
    finally:
        os.close(fd)


def soname_fd(fd: int, max_table: int = MAX_TABLE) -> str | None:
    """soname() of the file open at ``fd``, reading at most ``max_table`` bytes of its
    program header table and of its dynamic segment (plus the 64-byte ELF header and
    MAX_NAME + 1 bytes of the name): what one file costs, whatever it claims. A table
    larger than that is an ElfError; a dynamic segment is read only that far (a SONAME
    entry past it counts as none). Also OverflowError for offsets past what pread takes."""
    end, is64, phdrs = _program_headers(fd, max_table)
    dyn = next((p for p in phdrs if p[0] == PT_DYNAMIC), None)
    if dyn is None:
        return None
    data = os.pread(fd, min(dyn[3], max_table), dyn[1])
    fmt = end + ("qQ" if is64 else "iI")
    size = struct.calcsize(fmt)
    strtab = name_off = None
    for off in range(0, len(data) - size + 1, size):
        tag, val = struct.unpack_from(fmt, data, off)
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = val
        elif tag == DT_SONAME:
            name_off = val
    if strtab is None or name_off is None:
        return None
    for p_type, p_offset, p_vaddr, p_filesz in phdrs:
        if p_type == PT_LOAD and p_vaddr <= strtab < p_vaddr + p_filesz:
            raw = os.pread(fd, MAX_NAME + 1, strtab - p_vaddr + p_offset + name_off)
            break
    else:
        raise ElfError("DT_STRTAB outside the loaded segments")
    name, nul, _ = raw.partition(b"\0")
    text = name.decode("ascii", "replace")
    if (
        not nul
        or not text.isprintable()
        or text in ("", ".", "..")
        or any(c in text for c in "/: \ufffd")
    ):
        return None
    return text
