"""gpunode.util.cabi: the start path's ctypes pieces, built on _ctypes, behave as ctypes'."""

from __future__ import annotations

import ctypes
import errno
import os

from gpunode.util import cabi


def test_types_have_ctypes_sizes_and_values():
    for ours, theirs in [
        (cabi.c_int, ctypes.c_int),
        (cabi.c_uint, ctypes.c_uint),
        (cabi.c_long, ctypes.c_long),
        (cabi.c_size_t, ctypes.c_size_t),
        (cabi.c_uint64, ctypes.c_uint64),
    ]:
        assert cabi.sizeof(ours) == ctypes.sizeof(theirs), ours
        assert ours(-1).value == theirs(-1).value, ours  # the same signedness and width


def test_structure_layout_is_ctypes_layout():
    class Ours(cabi.Structure):
        _fields_ = [(n, cabi.c_uint64) for n in ("flags", "mode", "resolve")]

    class Theirs(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "mode", "resolve")]

    assert cabi.sizeof(Ours) == ctypes.sizeof(Theirs) == 24
    assert bytes(Ours(1, 2, 3)) == bytes(Theirs(1, 2, 3))


def test_libc_functions_return_their_type_and_keep_errno():
    syscall = cabi.libc_function("syscall", cabi.c_long)
    getpid = {"x86_64": 39, "aarch64": 172}[os.uname().machine]
    assert syscall(getpid) == os.getpid()
    umount2 = cabi.libc_function("umount2")
    assert umount2(b"/nonexistent/gpunode-cabi", 0) == -1
    assert cabi.get_errno() in (errno.ENOENT, errno.EPERM)


def test_openat2_through_a_structure_by_reference(tmp_path):
    class OpenHow(cabi.Structure):
        _fields_ = [(n, cabi.c_uint64) for n in ("flags", "mode", "resolve")]

    (tmp_path / "f").write_text("x")
    syscall = cabi.libc_function("syscall", cabi.c_long)
    how = OpenHow(os.O_RDONLY | os.O_CLOEXEC, 0, 0x10)  # RESOLVE_IN_ROOT
    dir_fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = syscall(437, dir_fd, b"/f", cabi.byref(how), cabi.sizeof(how))
        assert fd >= 0, os.strerror(cabi.get_errno())
        assert os.read(fd, 1) == b"x"
        os.close(fd)
    finally:
        os.close(dir_fd)
