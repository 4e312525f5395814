"""The few ctypes pieces the container start path needs, built on CPython's ``_ctypes``
directly (issue 28).

``import ctypes`` runs ctypes/__init__.py, which defines every C type, loader and helper
of the module and makes a libffi closure at import: about 16 million instructions,
~4 ms of every GPU container start (measured with callgrind against ``_ctypes`` alone:
~1 million). The hook's system calls (gpunode.hook.linux) and openat2
(gpunode.util.safepath) need only: the integer types below, Structure, byref, sizeof,
get_errno and libc functions that keep errno, which are ``_ctypes``'s own objects made the
way ctypes/__init__.py makes them (ctypes.CDLL(None, use_errno=True), c_int, c_uint, ...).

Linux only (LP64 or ILP32: ``long`` and ``size_t`` have the same size on both).
"""

import _ctypes

Structure = _ctypes.Structure
byref = _ctypes.byref
sizeof = _ctypes.sizeof
get_errno = _ctypes.get_errno


class c_int(_ctypes._SimpleCData):
    _type_ = "i"


class c_uint(_ctypes._SimpleCData):
    _type_ = "I"


class c_long(_ctypes._SimpleCData):
    _type_ = "l"


class c_size_t(_ctypes._SimpleCData):  # unsigned long: size_t on Linux
    _type_ = "L"


class c_uint64(_ctypes._SimpleCData):
    _type_ = "Q"


class _Libc:
    """What ctypes.CDLL(None, use_errno=True) is to the functions taken from it: the
    process's own symbols (dlopen(NULL)) and the handle a function pointer is made from."""

    _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)


def libc_function(name, restype=c_int):
    """The C function `name` of the process (libc), errno kept for get_errno, returning
    `restype`; arguments converted as ctypes converts them without argtypes."""

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = restype

    return Function((name, _Libc))
