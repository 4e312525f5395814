"""apt's lists: current, or stale by age, by a newer sources file or missing; refreshed
(apt-get update) only when stale."""

from __future__ import annotations

import os
import time

import pytest

from gpunode.provision import CheckFailed, lists


def apt_root(tmp_path, lists_age: float, sources_age: float):
    now = time.time()
    lists_dir = tmp_path / lists.LISTS
    lists_dir.mkdir(parents=True)
    (lists_dir / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").write_text("")
    os.utime(lists_dir, (now - lists_age, now - lists_age))
    src = tmp_path / "etc/apt/sources.list.d"
    src.mkdir(parents=True)
    (src / "debian.sources").write_text("Types: deb\n")
    for p in (src, src / "debian.sources"):
        os.utime(p, (now - sources_age, now - sources_age))
    return tmp_path


def test_lists_current_stale_by_age_by_sources_or_missing(tmp_path):
    assert lists.apt_stale(3600, apt_root(tmp_path / "a", 60, 600)) == ""
    assert "older" not in lists.apt_stale(3600, apt_root(tmp_path / "b", 60, 600))
    assert "7200 s old" in lists.apt_stale(3600, apt_root(tmp_path / "c", 7200, 9000))
    assert "sources file changed" in lists.apt_stale(3600, apt_root(tmp_path / "d", 600, 60))
    assert lists.apt_stale(3600, tmp_path / "empty") == "no package lists yet"


def test_refresh_runs_apt_get_update_only_when_stale(tmp_path):
    calls = []

    def runner(argv):
        calls.append(argv)
        return 0, "", ""

    fresh = apt_root(tmp_path / "fresh", 60, 600)
    assert lists.refresh("apt", 3600, runner, fresh) == {"refreshed": False, "reason": "current"}
    assert calls == []
    stale = apt_root(tmp_path / "stale", 600, 60)
    assert lists.refresh("apt", 3600, runner, stale)["refreshed"] is True
    assert calls == [["apt-get", "update", "-q"]]
    # an update that changed no list leaves the directory's mtime: the stamp says "current"
    assert lists.apt_stale(3600, stale) == ""
    assert lists.refresh("apt", 3600, runner, stale)["refreshed"] is False
    old = apt_root(tmp_path / "old", 7200, 9000)
    assert lists.refresh("apt", 3600, runner, old)["refreshed"] is True
    assert lists.refresh("apt", 3600, runner, old)["refreshed"] is False
    assert len(calls) == 2
    calls.pop()
    assert lists.refresh("apt", -1, runner, stale)["refreshed"] is False
    assert lists.refresh("dnf", 0, runner, stale)["refreshed"] is False
    assert len(calls) == 1

    def failing(argv):
        return 100, "", "W: some warning\nE: Failed to fetch http://deb.debian.org/x  404\n"

    with pytest.raises(CheckFailed, match=r"^apt-get update failed \(.*\): E: Failed to fetch"):
        lists.refresh("apt", 3600, failing, apt_root(tmp_path / "failing", 600, 60))
