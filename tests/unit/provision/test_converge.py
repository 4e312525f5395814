"""What lets a converged node cost the roles one command each: the plans' node state and
`todo` (driver-plan, cuda-plan), compared with what the node has installed and held."""

from __future__ import annotations

import json

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.provision import converge, lists, packages

D12 = ["--distro", "debian", "--release", "12", "--arch", "x86_64"]
DRIVER = ["nvidia-smi", "libcuda1", "libnvidia-ml1"]
V = "535.261.03-1"
PIN = (
    "# Managed by gpunode (nvidia_driver role): the NVIDIA driver pin.\n"
    "Package: src:nvidia-graphics-drivers\nPin: version 535.261.03-*\nPin-Priority: 1001\n"
)


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
    # held again after the install: apt-mark hold after the release (an upgrade once left
    # the driver unheld: todo.hold was empty because they were held when it was planned)
    assert out["todo"]["hold"] == DRIVER and out["todo"]["pin"] is False
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


# --- cuda-repo: NVIDIA's repository must be among the node's sources before a resolve -------

MIRROR = "http://10.0.0.5/compute/cuda/repos/{repo}/{arch}/"
MIRROR_D12 = "http://10.0.0.5/compute/cuda/repos/debian12/x86_64/"


def cuda_repo_plan(capsys, pin_file, root, *extra):
    code = cli_main(
        ["provision", "driver-plan", "--resolve", "--json", "--source", "cuda-repo",
         "--branch", "580", "--version", "580.105.08", "--no-kernel-module",
         "--gpu-device-id", "2330", "--pin-file", str(pin_file), "--root", str(root),
         "--cuda-repo-url", MIRROR, *D12, *extra]
    )  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def test_a_fresh_node_without_the_repository_gets_an_unresolved_plan(node, capsys, tmp_path,
                                                                      monkeypatch):  # fmt: skip
    """No madison on a repository the node does not have: the plan says so (configured
    false, todo.repository) with the repository from the values alone, and resolves
    nothing; the role adds the repository and plans again."""
    monkeypatch.setattr(packages, "resolve_driver", lambda *a: pytest.fail("resolved"))
    monkeypatch.setattr(packages, "available", lambda *a: pytest.fail("asked apt"))
    _, pin_file, _, _ = node
    code, out = cuda_repo_plan(capsys, pin_file, tmp_path)
    assert code == 0 and out["ok"], out
    assert out["repository"]["url"] == MIRROR_D12 and out["repository"]["configured"] is False
    assert out["todo"]["repository"] is True and out["converged"] is False
    assert out["todo"]["pin_packages"] == ["nvidia-driver-pinning-580.105.08"]
    assert out["install"] == ["nvidia-driver-cuda"] and "versions" not in out
    assert "is not among this node's package sources yet" in out["message"]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        # what the role writes (roles/nvidia_driver/tasks/repository.yml: the plan's line)
        ("nvidia-cuda.list", f"deb [signed-by=/etc/apt/keyrings/nvidia-cuda.asc] {MIRROR_D12} /\n"),
        ("nvidia-cuda.sources",  # a deb822 entry, as ansible's deb822_repository writes one
         f"X-Repolib-Name: nvidia-cuda\nTypes: deb\nURIs: {MIRROR_D12}\nSuites: /\n"
         "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc\n"),
        ("cuda.list", f"deb [signed-by=/etc/apt/keyrings/nvidia-cuda.asc] {MIRROR_D12[:-1]} /\n"),
    ],
)  # fmt: skip
def test_a_node_with_the_repository_resolves_in_one_run(node, capsys, tmp_path, monkeypatch,
                                                        name, text):  # fmt: skip
    monkeypatch.setattr(packages, "available", lambda family, p: ["580.105.08-1"])
    _, pin_file, _, _ = node
    d = tmp_path / "etc/apt/sources.list.d"
    d.mkdir(parents=True)
    (d / name).write_text(text)
    code, out = cuda_repo_plan(capsys, pin_file, tmp_path)
    assert code == 0 and out["repository"]["configured"] is True, out
    assert "repository" not in out["todo"] and out["versions"]
    # NVIDIA's own repository is another URL: not configured by the mirror's entry
    (d / name).write_text(text.replace("10.0.0.5", "developer.download.nvidia.com"))
    _, out = cuda_repo_plan(capsys, pin_file, tmp_path)
    assert out["repository"]["configured"] is False
    # a commented-out entry is no entry
    (d / name).write_text("# " + text.replace("\n", "\n# "))
    _, out = cuda_repo_plan(capsys, pin_file, tmp_path)
    assert out["repository"]["configured"] is False


def test_repository_configured_reads_dnf_repo_files(tmp_path):
    repo = {"url": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/"}
    assert converge.repository_configured(repo, "dnf", tmp_path) is False
    (tmp_path / "etc/yum.repos.d").mkdir(parents=True)
    (tmp_path / "etc/yum.repos.d/nvidia-cuda.repo").write_text(
        f"[nvidia-cuda]\nname=NVIDIA CUDA\nbaseurl = {repo['url']}\ngpgcheck=1\n"
    )
    assert converge.repository_configured(repo, "dnf", tmp_path) is True
