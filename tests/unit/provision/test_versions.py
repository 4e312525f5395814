"""Version parsing: a driver's and CUDA's version from a package version, pins, minimums."""

from __future__ import annotations

from gpunode.provision import versions


def test_package_versions():
    assert versions.driver_of_package("535.309.01-0+deb12u1") == "535.309.01"
    assert versions.driver_of_package("3:560.35.05-1.el9") == "560.35.05"
    assert versions.driver_of_package("535.183.01-0ubuntu0.22.04.1") == "535.183.01"
    assert versions.cuda_of_package("11.8.89~11.8.0-5~deb12u1") == "11.8"
    assert versions.cuda_of_package("11.1.1+~10.9.0.58~11.8.0-5~deb12u1") == "11.8"
    assert versions.cuda_of_package("12.4.127-1") == "12.4"
    assert versions.matches_pin("535.261.03", "535") and not versions.matches_pin("550.1", "535")
    assert versions.at_least("580.65.06", "580") and not versions.at_least("575.57.08", "580")
