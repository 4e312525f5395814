"""engine.active's one rule (gpunode.util.enginecheck), as `gpunode validate` applies it on a
node with GPU and `gpunode report` applies it to the validation playbook's `docker version`
on a node without GPU (no gpunode there)."""

from __future__ import annotations

import pytest

from gpunode.util import enginecheck


def test_an_engine_that_answers_passes_with_its_version():
    assert enginecheck.verdict("docker", "26.1.5") == ("pass", "docker 26.1.5 answers")


def test_an_engine_that_does_not_answer_fails_with_why():
    assert enginecheck.verdict("docker", None, "`docker info` failed: x") == (
        "fail",
        "`docker info` failed: x",
    )


@pytest.mark.parametrize(
    ("run", "status", "detail"),
    [
        ({"rc": 0, "stdout": "26.1.5\n", "stderr": ""}, "pass", "docker 26.1.5 answers"),
        (
            {"rc": 1, "stdout": "", "stderr": "Cannot connect to the Docker daemon\nmore\n"},
            "fail",
            "docker: Cannot connect to the Docker daemon (rc 1)",
        ),
        ({"rc": 2, "stdout": "", "stderr": "", "msg": "[Errno 2] No such file"}, "fail",
         "docker: [Errno 2] No such file (rc 2)"),
        ({"rc": 3}, "fail", "docker: no output (rc 3)"),
    ],
)  # fmt: skip
def test_the_playbooks_engine_answer(run, status, detail):
    assert enginecheck.from_command("docker", run) == {
        "id": "engine.active",
        "title": "Container engine answers",
        "status": status,
        "detail": detail,
    }
