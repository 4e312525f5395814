from __future__ import annotations

from gpunode.validate import versions
from gpunode.validate.expect import Expectations

from .fakes import inventory

VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Release Build\nGCC version:  gcc 12\n"
)


def fake_dpkg(installed: dict[str, str]):
    def runner(argv):
        if argv[:2] == ["dpkg-query", "-W"] and argv[3].startswith("${Package}|${db:Status-Want}"):
            # gpunode.provision.packages.states: one line per known package, rc 1 if any unknown
            lines = [f"{p}|install|installed|{installed[p]}\n" for p in argv[4:] if p in installed]
            return (0 if len(lines) == len(argv[4:]) else 1), "".join(lines), ""
        if argv[:2] == ["dpkg-query", "-W"]:
            import fnmatch

            lines = [f"{p}|installed|{v}" for p, v in installed.items()
                     if any(fnmatch.fnmatch(p, pat) for pat in argv[4:])]  # fmt: skip
            return (0 if lines else 1), "\n".join(lines), ""
        raise AssertionError(argv)

    return runner


def run(tmp_path, loaded="535.261.03", installed=None, expect=None, inv=None):
    (tmp_path / "version").write_text(VERSION.format(v=loaded))
    inv = inventory() if inv is None else inv
    inv.driver_version = loaded
    return versions.evaluate(inv, expect or Expectations(), proc_root=str(tmp_path),
                             runner=fake_dpkg(installed or {}), fam="apt")  # fmt: skip


def checks(out):
    return {c.id: c for c in out[1]}


def test_all_agree_and_cuda_compatible(tmp_path):
    out = run(tmp_path, installed={"libnvidia-ml1": "535.261.03-1",
                                   "libcudart11.0": "11.8.89~11.8.0-5~deb12u1"},
              expect=Expectations(driver_pin="535.261.03", cuda=["11.8"]))  # fmt: skip
    c = checks(out)
    assert c["driver.version_match"].status == "pass"
    assert c["cuda.compatible"].status == "pass"
    assert c["cuda.compatible"].detail == "CUDA 11.8 runs on driver 535.261.03 (minimum 520.61.05)"
    assert out[0]["driver_installed"] == "535.261.03" and out[0]["cuda_installed"] == ["11.8"]
    assert out[0]["driver_package"] == "libnvidia-ml1"


def test_old_module_after_package_upgrade(tmp_path):
    out = run(tmp_path, loaded="535.247.01", installed={"libnvidia-ml1": "535.261.03-1"},
              expect=Expectations(driver_pin="535"))  # fmt: skip
    c = checks(out)["driver.version_match"]
    assert c.status == "fail" and "535.247.01, older than the installed package" in c.detail


def test_ubuntu_package_found_by_pattern_and_pin_mismatch(tmp_path):
    out = run(tmp_path, loaded="550.163.01",
              installed={"libnvidia-compute-550-server": "550.163.01-0ubuntu0.24.04.1"},
              expect=Expectations(driver_pin="535"))  # fmt: skip
    c = checks(out)["driver.version_match"]
    assert c.status == "fail" and "pinned branch is 535" in c.detail
    assert out[0]["driver_package"] == "libnvidia-compute-550-server"


def test_no_package_no_pin_is_skipped_pin_without_package_fails(tmp_path):
    c = checks(run(tmp_path))["driver.version_match"]
    assert c.status == "skip" and "no pin given" in c.detail
    c = checks(run(tmp_path, expect=Expectations(driver_pin="535.261.03")))["driver.version_match"]
    assert c.status == "fail" and "libnvidia-ml1 is not installed" in c.detail


def test_cuda_refused_and_expected_missing(tmp_path):
    out = run(tmp_path, installed={"cuda-cudart-12-4": "12.4.127-1"},
              expect=Expectations(cuda=["12.4", "11.8"]))  # fmt: skip
    c = checks(out)["cuda.compatible"]
    assert c.status == "fail"
    assert "CUDA 12.4 needs NVIDIA driver >= 550.54.14" in c.detail
    assert "CUDA 11.8 is expected but not installed (installed: 12.4)" in c.detail
    # the minor-compatibility policy accepts 12.4 on 535
    out = run(tmp_path, installed={"cuda-cudart-12-4": "12.4.127-1"},
              expect=Expectations(policy="minor"))  # fmt: skip
    assert checks(out)["cuda.compatible"].status == "pass"


def test_nothing_cuda_is_skipped(tmp_path):
    c = checks(run(tmp_path))["cuda.compatible"]
    assert c.status == "skip" and "none expected" in c.detail
