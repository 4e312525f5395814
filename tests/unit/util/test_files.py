"""gpunode.util.files: the one atomic write (mode and owner kept, before-replace, unchanged
files left alone) and the lock file."""

from __future__ import annotations

import os
import stat

import pytest

from gpunode.util import files


def test_write_atomic_skips_unchanged_and_keeps_the_old_mode(tmp_path):
    path = tmp_path / "sub" / "f"
    assert files.write_atomic(path, b"one", 0o640) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert files.write_atomic(path, b"one") is False  # same bytes: not rewritten
    like = path.stat()
    assert files.write_atomic(path, b"two", 0o600, like=like) is True
    assert path.read_bytes() == b"two" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(os.listdir(path.parent)) == ["f"]


def test_a_failing_before_replace_leaves_the_file_and_no_temporary(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    seen = []

    def refuse(tmp: str) -> None:
        with open(tmp, "rb") as fh:
            seen.append(fh.read())
        raise ValueError("no")

    with pytest.raises(ValueError):
        files.write_atomic(path, b"new", before_replace=refuse, sync_dir=True)
    assert seen == [b"new"] and path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_write_atomic_replaces_a_symlink_never_writes_through_it(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    link = tmp_path / "link"
    link.symlink_to(target)
    files.write_atomic(link, b"new", skip_if_same=False)
    assert not link.is_symlink() and link.read_bytes() == b"new"
    assert target.read_bytes() == b"keep"


def test_lock_is_removed_on_release(tmp_path):
    lock = tmp_path / "x.lock"
    with files.Lock(lock):
        assert lock.exists()
    assert not lock.exists()
