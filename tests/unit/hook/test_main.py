"""The hook's command line: the OCI state on stdin, one-line errors, --version."""

from __future__ import annotations

import json
import os

import pytest

from .helpers import run_hook


def test_bundle_state_on_stdin(tmp_path, rootfs):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    os.symlink("../rootfs", bundle / "rootfs")
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = {
        "ociVersion": "1.0.2",
        "id": "c1",
        "status": "creating",
        "pid": 1,
        "bundle": str(bundle),
        "annotations": {},
    }
    rc, _, err = run_hook("create-symlinks", "--link", "b::/a/l", stdin=json.dumps(state))
    assert rc == 0, err
    assert os.readlink(rootfs / "a/l") == "b"
    rc, _, err = run_hook("create-symlinks", "--link", "b::/a/l", stdin="not json")
    assert rc == 1 and err.startswith("gpunode-hook: create-symlinks: invalid OCI state")
    # within the size bound but nested past the decoder's depth: one line, no traceback
    rc, _, err = run_hook("create-symlinks", "--link", "b::/a/l", stdin="[" * 100_000)
    assert rc == 1 and err.strip() == (
        "gpunode-hook: create-symlinks: invalid OCI state JSON on stdin: nested too deeply"
    ), err


@pytest.mark.parametrize(
    "args",
    [
        ["create-symlinks", "--link", "nocolons"],
        ["create-symlinks", "--link", "a::relative/link"],
        ["create-symlinks", "--link", "a::/"],
        ["update-ldcache", "--folder", "relative"],
        ["update-ldcache", "--folder", "/ok\n/evil"],
        ["mount-proc-driver", "--gpu", "../../etc"],
        ["configure", "--driver-root", "relative/dir", "--proc-driver"],
        ["configure", "--ldconfig-path", "/sbin/ldconfig", "--folder", "/x"],  # removed
        ["configure", "--library", "libcuda.so.1", "--folder", "/x"],
        ["configure", "--library", "libcuda.so.1::relative/libcuda.so.1"],
        ["update-ldcache", "--library", "a/b.so.1::/usr/lib/b.so.1"],
        ["bogus"],
        [],
    ],
)
def test_bad_arguments_are_one_line_errors(rootfs, args):
    rc, _out, err = run_hook(*args, "--root", str(rootfs))
    assert rc == 1
    assert err.startswith("gpunode-hook: ") and err.count("\n") == 1, err


def test_version():
    rc, out, _ = run_hook("--version")
    assert rc == 0 and out.startswith("gpunode-hook ")
