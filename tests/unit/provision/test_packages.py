"""Package-version resolution against (fake) package metadata, installed versions and states."""

from __future__ import annotations

import pytest

from gpunode.provision import ProvisionError, packages

MADISON = (
    " nvidia-smi | 535.309.01-0+deb12u1 | http://deb.debian.org/debian-security "
    "bookworm-security/non-free amd64 Packages\n"
    " nvidia-smi | 535.261.03-1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages\n"
)


def fake(outputs):
    def runner(argv):
        for prefix, result in outputs.items():
            if " ".join(argv).startswith(prefix):
                return result
        return 1, "", "unexpected"

    return runner


def test_resolve_exact_and_branch():
    run = fake({"apt-cache madison": (0, MADISON, "")})
    assert packages.resolve_driver("apt", ["nvidia-smi"], "535.261.03", "v", run) == {
        "nvidia-smi": "535.261.03-1"
    }
    assert packages.resolve_driver("apt", ["nvidia-smi"], "535", "v", run) == {
        "nvidia-smi": "535.309.01-0+deb12u1"
    }


def test_resolve_names_variable_and_offer():
    run = fake({"apt-cache madison": (0, MADISON, "")})
    with pytest.raises(ProvisionError) as exc:
        packages.resolve_driver("apt", ["nvidia-smi"], "550", "nvidia_driver_branch", run)
    assert str(exc.value) == (
        "nvidia_driver_branch: 550 is not available from this node's package sources for nvidia-smi; "
        "available: 535.309.01, 535.261.03"
    )
    empty = fake({"apt-cache madison": (0, "", "")})
    with pytest.raises(ProvisionError, match="package nvidia-smi is not available"):
        packages.resolve_driver("apt", ["nvidia-smi"], "535", "nvidia_driver_branch", empty)


def test_resolve_cuda_against_metadata():
    run = fake(
        {
            "apt-cache madison libcudart11.0": (
                0,
                " libcudart11.0 | 11.8.89~11.8.0-5~deb12u1 | x\n",
                "",
            )
        }
    )
    assert packages.resolve_cuda("apt", {"11.8": "libcudart11.0"}, "v", run) == {
        "11.8": "11.8.89~11.8.0-5~deb12u1"
    }
    with pytest.raises(
        ProvisionError,
        match=r"cuda_toolkit_versions: CUDA 12.4 is not available .*libcudart11.0: 11.8",
    ):
        packages.resolve_cuda("apt", {"12.4": "libcudart11.0"}, "cuda_toolkit_versions", run)


def test_installed():
    run = fake({"dpkg-query": (0, "libnvidia-ml1|install|installed|535.261.03-1\n", "")})
    assert packages.installed("apt", "libnvidia-ml1", run) == "535.261.03-1"
    assert (
        packages.installed("apt", "x", fake({"dpkg-query": (0, "x|install|config-files|1\n", "")}))
        is None
    )
    assert (
        packages.installed("apt", "x", fake({"dpkg-query": (1, "", "no packages found")})) is None
    )
    assert (
        packages.installed("dnf", "x", fake({"rpm -q": (0, "3:560.35.05-1.el9", "")}))
        == "3:560.35.05-1.el9"
    )


def test_states_in_one_query():
    calls = []

    def run(argv):
        calls.append(argv)
        # dpkg-query exits 1 when one of the names is unknown, and still prints the others
        return (
            1,
            "a|hold|installed|1.0-1\nb|install|installed|2.0-1\nc|deinstall|config-files|3\n",
            "",
        )

    st = packages.states("apt", ["a", "b", "c", "d", "a"], run)
    assert len(calls) == 1 and calls[0][-4:] == ["a", "b", "c", "d"]
    assert st == {
        "a": packages.State("1.0-1", True),
        "b": packages.State("2.0-1", False),
        "c": packages.State(None, False),
        "d": packages.State(None, False),
    }
    dnf = packages.states("dnf", ["x"], fake({"rpm -q": (0, "3:560.35.05-1.el9", "")}))
    assert dnf == {"x": packages.State("3:560.35.05-1.el9", None)}
