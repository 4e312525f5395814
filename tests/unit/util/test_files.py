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


# ------------------------------------------------- temporary names nobody can take (17.8)


def _others_file(path, uid=65534):
    path.write_bytes(b"theirs")
    os.chown(path, uid, uid)
    os.chmod(path, 0o666)


def _predictable_names(directory, name):
    """Every name the old scheme used for this process (.NAME.PID.tmp)."""
    return [directory / f".{name}.{os.getpid()}.tmp"]


@pytest.fixture
def root_only():
    if os.geteuid() != 0:
        pytest.skip("needs root to create another user's file")


def test_a_prepared_temporary_name_does_not_own_the_result(tmp_path, root_only):
    """Before: write_atomic opened .NAME.PID.tmp with O_TRUNC and no O_EXCL, so another
    user who created that name first owned the file that replaced NAME."""
    for trap in _predictable_names(tmp_path, "f"):
        _others_file(trap)
    files.write_atomic(tmp_path / "f", b"ours", 0o644)
    st = (tmp_path / "f").stat()
    assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o644)
    assert (tmp_path / "f").read_bytes() == b"ours"
    for trap in _predictable_names(tmp_path, "f"):
        assert trap.read_bytes() == b"theirs"  # left alone, never written through


def test_a_taken_random_name_is_never_opened(tmp_path, monkeypatch, root_only):
    """The name is random and created with O_EXCL|O_NOFOLLOW: a file or link found under
    the drawn name is skipped (another name is drawn), never used, never removed."""
    draws = iter([b"\x01" * 8, b"\x01" * 8, b"\x02" * 8])
    monkeypatch.setattr(files.os, "urandom", lambda n: next(draws))
    taken = tmp_path / f".f.{'01' * 8}.tmp"
    _others_file(taken)
    files.write_atomic(tmp_path / "f", b"ours", skip_if_same=False)
    assert (tmp_path / "f").stat().st_uid == os.geteuid()
    assert taken.read_bytes() == b"theirs" and taken.stat().st_uid == 65534
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    taken.unlink()
    taken.symlink_to(victim)
    draws = iter([b"\x01" * 8, b"\x03" * 8])
    monkeypatch.setattr(files.os, "urandom", lambda n: next(draws))
    files.write_atomic(tmp_path / "g", b"ours", skip_if_same=False)
    assert victim.read_bytes() == b"keep" and taken.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [taken.name, "f", "g", "victim"]


def test_write_set_temporaries_are_not_taken_either(tmp_path, root_only):
    for name in ("index.html", "junit.xml"):
        for trap in _predictable_names(tmp_path, name):
            _others_file(trap)
    files.write_set(tmp_path, {"index.html": b"<html>", "junit.xml": b"<x/>"})
    for name in ("index.html", "junit.xml"):
        assert (tmp_path / name).stat().st_uid == os.geteuid()
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644
