"""What lets a converged node cost the roles one command each: the plans' node state and
`todo`, apt list freshness, the batch validation and the virtualenv install."""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.provision import CheckFailed, converge, lists, packages, venv

D12 = ["--distro", "debian", "--release", "12", "--arch", "x86_64"]
DRIVER = ["nvidia-smi", "libcuda1", "libnvidia-ml1"]
V = "535.261.03-1"
PIN = (
    "# Managed by gpunode (nvidia_driver role): the NVIDIA driver pin.\n"
    "Package: src:nvidia-graphics-drivers\nPin: version 535.261.03-*\nPin-Priority: 1001\n"
)


# --- apt's lists ---------------------------------------------------------------------


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


# --- driver-plan --resolve: state and todo ----------------------------------------------


@pytest.fixture
def node(monkeypatch, tmp_path):
    """A Debian 12 node whose package manager is a dict: name -> (version, held)."""
    state: dict[str, tuple[str | None, bool]] = {}
    monkeypatch.setattr(
        packages,
        "resolve_driver",
        lambda family, names, pin, variable: dict.fromkeys(names, V),
    )
    monkeypatch.setattr(
        packages,
        "resolve_cuda",
        lambda family, vp, variable: dict.fromkeys(vp, "11.8.89~11.8.0-5~deb12u1"),
    )
    monkeypatch.setattr(
        packages,
        "states",
        lambda family, names: {
            n: packages.State(*state.get(n, (None, False))) for n in dict.fromkeys(names)
        },
    )
    monkeypatch.setattr(
        packages, "installed", lambda family, name: state.get(name, (None, False))[0]
    )
    refreshed = []
    monkeypatch.setattr(
        lists, "refresh", lambda family, age: refreshed.append(age) or {"refreshed": False}
    )
    matched = []

    class Match:
        def __init__(self, ok):
            self.ok = ok

        def to_dict(self):
            return {"ok": self.ok, "message": "versions agree" if self.ok else "mismatch"}

    monkeypatch.setattr(
        converge, "node_match", lambda pkg, pin, proc: matched.append(pkg) or Match(True)
    )
    pin_file = tmp_path / "pin"
    return state, pin_file, matched, refreshed


def driver_plan(capsys, pin_file, *extra):
    code = cli_main(
        ["provision", "driver-plan", "--resolve", "--json", "--branch", "535",
         "--version", "535.261.03", "--no-kernel-module", "--gpu-device-id", "20b0",
         "--pin-file", str(pin_file), "--refresh-lists", "3600", *D12, *extra]
    )  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def test_driver_plan_converged_node_has_nothing_to_do(node, capsys):
    state, pin_file, matched, refreshed = node
    state.update({p: (V, True) for p in DRIVER})
    pin_file.write_text(PIN)
    code, out = driver_plan(capsys, pin_file, "--check")
    assert code == 0 and out["converged"] is True, out["todo"]
    assert not any(out["todo"].values())
    assert out["pin_current"] is True and out["held"] == dict.fromkeys(DRIVER, True)
    # the matching-version check rides along once the pinned packages are in place
    assert matched == ["libnvidia-ml1"] and out["check"]["ok"] is True
    assert refreshed == [3600]


def test_driver_plan_says_what_is_left_to_do(node, capsys):
    state, pin_file, matched, _ = node
    # a fresh node: nothing installed, no pin file
    code, out = driver_plan(capsys, pin_file, "--check")
    assert code == 0 and out["converged"] is False
    assert out["todo"]["pin"] is True
    assert out["todo"]["install"] == [f"{p}={V}" for p in DRIVER]
    assert out["todo"]["hold"] == DRIVER and out["todo"]["unhold"] == []
    assert "check" not in out and matched == []  # nothing installed: checked after the install
    # installed at another version and held: released, installed at the pin, held again
    pin_file.write_text(PIN)
    state.update({p: ("535.247.01-1", True) for p in DRIVER})
    code, out = driver_plan(capsys, pin_file, "--check")
    assert out["todo"]["unhold"] == DRIVER and out["todo"]["install"] == [
        f"{p}={V}" for p in DRIVER
    ]
    assert out["todo"]["hold"] == [] and out["todo"]["pin"] is False
    # at the pin but one not held; --no-hold: holding is not asked for
    state.update({p: (V, p != "libcuda1") for p in DRIVER})
    _, out = driver_plan(capsys, pin_file)
    assert out["todo"]["hold"] == ["libcuda1"] and out["converged"] is False
    _, out = driver_plan(capsys, pin_file, "--no-hold")
    assert out["converged"] is True
    # a pin file someone edited
    pin_file.write_text(PIN.replace("1001", "500"))
    _, out = driver_plan(capsys, pin_file, "--no-hold")
    assert out["todo"]["pin"] is True and out["pin_current"] is False


def test_driver_plan_refuses_an_unrequested_downgrade(node, capsys):
    state, pin_file, _, _ = node
    state.update({p: ("535.309.01-0+deb12u1", True) for p in DRIVER})
    code, out = driver_plan(capsys, pin_file, "--no-allow-downgrade")
    assert code == 1 and out["ok"] is False and out["downgrade"] is True
    assert "newer than the pin 535.261.03" in out["message"]
    assert "nvidia_driver_allow_downgrade: true" in out["message"]
    code, out = driver_plan(capsys, pin_file, "--allow-downgrade")
    assert code == 0 and out["todo"]["install"] == [f"{p}={V}" for p in DRIVER]


# --- cuda-plan --gate --state -------------------------------------------------------


def cuda_plan(capsys, profile, *extra, cuda="11.8"):
    code = cli_main(
        ["provision", "cuda-plan", "--json", "--gate", "strict", "--state", "--resolve",
         "--cuda", cuda, "--package-set", "runtime", "--profile-script", str(profile),
         "--refresh-lists", "3600", *D12, *extra]
    )  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def test_cuda_gate_refuses_before_anything_else(node, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(converge, "node_driver", lambda: ("535.261.03", True))
    _, _, _, refreshed = node
    code, out = cuda_plan(capsys, tmp_path / "profile", cuda="12.4")
    assert code == 1 and out["ok"] is False and "550.54.14" in out["message"]
    assert "todo" not in out and refreshed == []  # nothing planned, nothing refreshed


def test_cuda_plan_state_todo_profile_and_check(node, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(converge, "node_driver", lambda: ("535.261.03", True))
    state, _, _, _ = node
    profile = tmp_path / "gpunode-cuda.sh"
    code, out = cuda_plan(capsys, profile)
    assert code == 0 and out["converged"] is False
    assert out["todo"] == {"install": ["libcudart11.0"], "hold": ["libcudart11.0"], "profile": True}
    assert "check" not in out
    assert "CUDA_HOME=" in out["profile_script"] and out["profile_script"].endswith("esac\n")
    state["libcudart11.0"] = ("11.8.89~11.8.0-5~deb12u1", True)
    profile.write_text(out["profile_script"])
    code, out = cuda_plan(capsys, profile)
    assert code == 0 and out["converged"] is True and out["check"]["ok"] is True
    # installed, but another CUDA release under the same package name: the check fails
    state["libcudart11.0"] = ("12.4.131~12.4.1-1", True)
    code, out = cuda_plan(capsys, profile)
    assert code == 1 and "CUDA 11.8 was requested but libcudart11.0" in out["message"]


def test_driver_plan_makes_the_cuda_plan_in_the_same_run(node, capsys, monkeypatch, tmp_path):
    """--cuda-plan-args: cuda-plan's own result for those arguments under `cuda`, with the
    arguments it was made for; its failure is its own, the driver plan stays ok."""
    monkeypatch.setattr(converge, "node_driver", lambda: ("535.261.03", True))
    _, pin_file, _, _ = node
    profile = tmp_path / "gpunode-cuda.sh"
    cuda_args = ["--json", "--gate", "strict", "--state", "--resolve", "--cuda", "11.8",
                 "--package-set", "runtime", "--profile-script", str(profile),
                 "--refresh-lists", "3600", *D12]  # fmt: skip
    _, alone = cuda_plan(capsys, profile)
    code, out = driver_plan(capsys, pin_file, "--cuda-plan-args", json.dumps(cuda_args))
    assert code == 0 and out["ok"] is True
    assert out["cuda"] == {**alone, "args": cuda_args}
    # a CUDA the driver cannot run: the CUDA part fails, the driver's plan does not
    bad = [a if a != "11.8" else "12.4" for a in cuda_args]
    code, out = driver_plan(capsys, pin_file, "--cuda-plan-args", json.dumps(bad))
    assert code == 0 and out["ok"] is True
    assert out["cuda"]["ok"] is False and "550.54.14" in out["cuda"]["message"]
    assert out["cuda"]["args"] == bad
    # arguments cuda-plan does not take: that part says so
    code, out = driver_plan(capsys, pin_file, "--cuda-plan-args", '["--no-such"]')
    assert code == 0 and out["cuda"]["ok"] is False
    assert out["cuda"]["message"].startswith("bad arguments for provision cuda-plan")


@pytest.mark.parametrize("value", ["not json", '{"a": 1}', '["x", 1]'])
def test_driver_plan_bad_cuda_plan_args_is_one_line(node, capsys, value):
    _, pin_file, _, _ = node
    code = cli_main(
        ["provision", "driver-plan", "--resolve", "--branch", "535", "--no-kernel-module",
         "--gpu-device-id", "20b0", "--pin-file", str(pin_file), *D12,
         "--cuda-plan-args", value]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "--cuda-plan-args" in err and "cuda-plan's arguments" in err


# --- validate --batch ---------------------------------------------------------------


def test_validate_batch_judges_each_host(monkeypatch, capsys):
    hosts = {
        "good": ["--cuda=11.8", "--driver-version=535.261.03", "--driver-branch=535", *D12],
        "bad": ["--cuda=12.4", "--driver-version=535.261.03", *D12],
        "pin": ["--driver-version=535.x", *D12],
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(hosts)))
    assert cli_main(["provision", "validate", "--batch", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["hosts"]["good"]["ok"] is True
    assert out["hosts"]["bad"] == {
        "ok": False,
        "message": "cuda_toolkit_versions: CUDA 12.4 needs NVIDIA driver >= 550.54.14 (strict policy)"
        + out["hosts"]["bad"]["message"].split("(strict policy)", 1)[1],
    }
    assert out["hosts"]["pin"]["message"].startswith("nvidia_driver_version: ")
    assert out["message"] == "invalid inventory values on bad, pin"


@pytest.mark.parametrize("stdin", ["not json", '{"h": "--cuda=11.8"}', "[]"])
def test_validate_batch_bad_input_is_one_line(monkeypatch, capsys, stdin):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli_main(["provision", "validate", "--batch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpunode: error: --batch: stdin ") and err.count("\n") == 1


# --- install: the virtualenv from the wheels ------------------------------------------


@pytest.fixture
def fake_pip(monkeypatch):
    calls = []

    def run(argv, what, hint=""):
        calls.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            os.makedirs(argv[-1] + "/bin", exist_ok=True)
            open(argv[-1] + "/bin/python", "w").close()
        if argv[1:] == ["runtime", "install-links", "--prefix", argv[4], "--json"]:
            return json.dumps({"changed": False, "changes": []})
        return ""

    monkeypatch.setattr(venv, "_run", run)
    return calls


def test_install_only_when_the_wheels_differ(tmp_path, fake_pip):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "gpunode-0.1.0-py3-none-any.whl").write_bytes(b"one")
    target = tmp_path / "venv"
    out = venv.install(target, wheels, tmp_path / "bin")
    assert out["changed"] is True
    assert [c[1:3] for c in fake_pip[:2]] == [["-m", "venv"], ["-m", "pip"]]
    stamp = (target / venv.STAMP).read_text()
    fake_pip.clear()
    again = venv.install(target, wheels, tmp_path / "bin")
    assert again["changed"] is False and again["changes"] == []
    assert [c[1:3] for c in fake_pip] == [["runtime", "install-links"]]  # no venv, no pip
    (wheels / "gpunode-0.1.0-py3-none-any.whl").write_bytes(b"two")
    fake_pip.clear()
    dry = venv.install(target, wheels, tmp_path / "bin", dry_run=True)
    assert dry["changed"] is True and fake_pip == []
    assert (target / venv.STAMP).read_text() == stamp  # a dry run writes nothing
    assert venv.install(target, wheels, tmp_path / "bin")["changed"] is True
    assert fake_pip[0][1:3] == ["-m", "pip"]  # the venv exists: pip only


def test_install_without_wheels_says_so(tmp_path, capsys):
    (tmp_path / "w").mkdir()
    assert cli_main(["provision", "install", "--wheels", str(tmp_path / "w"), "--venv",
                     str(tmp_path / "v"), "--json"]) == 1  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["message"].startswith(f"no gpunode wheels in {tmp_path / 'w'}")
