"""The simulated releases (gpunode.sim.images.RELEASE) and how their nodes are run."""

from __future__ import annotations

import pytest

from gpunode.sim import cluster, images


def test_three_releases_with_their_containerd_series():
    assert images.RELEASES == ("bookworm", "trixie", "forky")
    assert {r: images.RELEASE[r].containerd for r in images.RELEASES} == {
        "bookworm": "1.6",
        "trixie": "1.7",
        "forky": "2.1",
    }


def test_forky_recipe():
    r = images.recipe("node", "forky")
    assert {"docker-cli", "nftables"} <= set(r.packages)
    assert "Acquire::Check-Valid-Until" in r.postinstall  # the lagging mirror's forky
    assert "Check-Valid-Until" not in images.recipe("node", "trixie").postinstall
    assert images.RELEASE["forky"].debootstrap_script == "sid"


@pytest.mark.parametrize(
    ("release", "have", "ok"),
    [
        ("forky", "2.1.9+ds1-5", True),
        ("forky", "1:2.1.10-1", True),
        ("forky", "2.2.0~rc1-1", False),
        ("forky", "2.10.1-1", False),
        ("trixie", "1.7.24~ds1-6+deb13u1", True),
    ],
)
def test_an_archive_that_moved_on_is_one_line(release, have, ok):
    problem = images.containerd_problem(images.RELEASE[release], have)
    assert (problem == "") is ok
    if not ok:
        assert problem.startswith(f"{release} node image: the archive's containerd is {have}, ")
        assert "expects 2.1.x" in problem and "\n" not in problem


def test_unknown_release_is_one_line():
    with pytest.raises(images.ImageError) as err:
        images.recipe("node", "duke")
    assert str(err.value) == "unknown Debian release 'duke'; accepted: bookworm, trixie, forky"


def test_forky_node_boots_on_cgroup2_with_its_own_namespace():
    forky = cluster.node_settings(cluster.NodeSpec("n14", "forky", "a100x4"))
    assert forky["cgroupns_mode"] == "private"
    assert not [v for v in forky["volumes"] if v.startswith("/sys/fs/cgroup")]
    sh, flag, script = forky["command"]
    assert (sh, flag) == ("/bin/sh", "-c")
    assert script == (f"{cluster.CGROUP2_MOUNT} && {cluster.NET_SYSCTL_RW} && exec /sbin/init")
    old = cluster.node_settings(cluster.NodeSpec("n12", "bookworm", "a100x4"))
    assert old["cgroupns_mode"] == "host"
    assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in old["volumes"]
    assert old["command"][0] == "/sbin/init"
