"""gpunode.runtime.specinputs: the image's library layout is read inside its root."""

from __future__ import annotations

import os

import pytest

from gpunode.runtime import specinputs


@pytest.mark.parametrize("link", ["/", "../" * 30, "/../../"])
def test_the_images_links_never_ask_the_host(tmp_path, link):
    """The review's existence oracle: an image whose /etc links to a host directory made
    the answer depend on the host's /etc/debian_version (os.lstat followed the link on the
    host). Resolved inside the root, the link's target is looked up in the image."""
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc/debian_version").write_text("12\n")  # a host file the image must not see
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    # /etc -> a path that, followed on the host, names the host's /etc
    target = link.rstrip("/") + str(host / "etc")
    os.symlink(target, rootfs / "etc")
    assert os.path.exists(os.path.join(rootfs, "etc/debian_version"))  # the host's view
    assert specinputs.container_libdir(str(rootfs)) == specinputs.OTHER_LIBDIR
    # the same target inside the image is what counts
    inside = rootfs / str(host / "etc").lstrip("/")
    inside.mkdir(parents=True)
    (inside / "debian_version").write_text("13\n")
    assert specinputs.container_libdir(str(rootfs)) == specinputs.DEBIAN_LIBDIR


def test_plain_and_missing(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    assert specinputs.container_libdir(str(rootfs)) == specinputs.OTHER_LIBDIR
    (rootfs / "etc/debian_version").symlink_to("/nonexistent")  # lstat semantics: present
    assert specinputs.container_libdir(str(rootfs)) == specinputs.DEBIAN_LIBDIR
    assert specinputs.container_libdir(str(tmp_path / "gone")) == specinputs.OTHER_LIBDIR
    assert specinputs.container_libdir(None) == specinputs.DEBIAN_LIBDIR
