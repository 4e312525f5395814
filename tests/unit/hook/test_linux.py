"""The seccomp filter of the confined ldconfig."""

from __future__ import annotations

import errno
import struct

from gpunode.hook import linux


def test_seccomp_program_shape():
    prog = linux.seccomp_program(0xC000003E, 0)
    ins = [struct.unpack_from("=HBBI", prog, i) for i in range(0, len(prog), 8)]
    assert ins[:4] == [
        (0x20, 0, 0, 4),
        (0x15, 1, 0, 0xC000003E),
        (0x06, 0, 0, 0x80000000),
        (0x20, 0, 0, 0),
    ]
    assert ins[-2:] == [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x50000 | errno.EPERM)]
    eperm = len(ins) - 1
    denied = {
        k for i, (code, jt, _, k) in enumerate(ins[4:], 4) if code == 0x15 and i + 1 + jt == eperm
    }
    assert {
        304,
        303,
        165,
        166,
        101,
        155,
        272,
        308,
        321,
        250,
        248,
        249,
        246,
        175,
        313,
        298,
        323,
    } <= denied
    assert 322 not in denied  # execveat: the hook's own exec of ldconfig
