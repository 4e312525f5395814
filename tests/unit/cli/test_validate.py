from __future__ import annotations

import json

import pytest

from gpunode.cli import validate as command
from gpunode.cli.main import main

from ..validate.fakes import result


@pytest.fixture
def fake_validate(monkeypatch):
    seen = {}

    def validate(expect, node=None):
        seen["expect"], seen["node"] = expect, node
        return result()

    monkeypatch.setattr(command, "validate", validate)
    return seen


def test_json_output_and_exit_code(fake_validate, capsys):
    assert main(["validate", "--json", "--node", "n1", "--expect-gpus", "1"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "gpunode.validate/v1" and out["exit_code"] == 1
    assert fake_validate["expect"].gpus == 1 and fake_validate["node"] == "n1"


def test_table_names_what_was_not_given(fake_validate, capsys):
    main(["validate"])
    out = capsys.readouterr().out
    assert "not given: expected GPU count (--expect-gpus, gpunode_expected_gpus)" in out


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--expect-gpus", "x"], "gpunode: error: --expect-gpus: 'x' is not a GPU count; expected an integer >= 0"),
        (["--textfile", "/nonexistent-dir/g.prom"],
         "gpunode: error: --textfile /nonexistent-dir/g.prom: "
         "directory /nonexistent-dir does not exist"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_nothing_runs(fake_validate, capsys, argv, line):
    assert main(["validate", *argv]) == 2
    cap = capsys.readouterr()
    assert cap.err.splitlines() == [line] and cap.out == ""
    assert fake_validate == {}


def test_textfile_write_failure_is_one_line(fake_validate, capsys, tmp_path, monkeypatch):
    path = tmp_path / "g.prom"
    path.write_text("old\n")

    def fail(p, r):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(command.output, "write_textfile", fail)
    assert main(["validate", "--textfile", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"gpunode: error: --textfile {path}: cannot write (Permission denied); "
                   "the previous file is unchanged"]  # fmt: skip
    assert path.read_text() == "old\n"


def test_bad_input_with_json_is_also_a_json_error(fake_validate, capsys):
    assert main(["validate", "--json", "--node", "n1", "--engine", "lxc"]) == 2
    cap = capsys.readouterr()
    assert json.loads(cap.out) == {
        "schema": "gpunode.validate/v1", "node": "n1", "error": "bad_input",
        "detail": "--engine: 'lxc' is not one of docker, podman, cri, none", "exit_code": 2,
    }  # fmt: skip
    assert cap.err.splitlines() == [
        "gpunode: error: --engine: 'lxc' is not one of docker, podman, cri, none"
    ]


def test_vars_from_standard_input(fake_validate, capsys, monkeypatch):
    """`gpunode validate --vars -`: the expectations piped in, as the playbook sends them."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"gpunode_expected_gpus": 3}')))
    assert main(["validate", "--json", "--node", "n1", "--vars", "-"]) == 1
    assert fake_validate["expect"].gpus == 3
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{not: [json")))
    fake_validate.clear()
    assert main(["validate", "--vars", "-"]) == 2
    cap = capsys.readouterr()
    err = cap.err.splitlines()
    assert len(err) == 1 and err[0].startswith("gpunode: error: --vars -: not valid YAML/JSON (")
    assert fake_validate == {} and "Traceback" not in cap.err


def test_mig_layout_flags(fake_validate, capsys, tmp_path):
    path = tmp_path / "mig.yaml"
    path.write_text("version: v1\nmig-configs:\n  all-1g:\n    - devices: all\n"
                    "      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n")  # fmt: skip
    main(["validate", "--expect-mig-config", str(path), "--expect-mig-name", "all-1g"])
    layout = fake_validate["expect"].mig_layout
    assert (layout.name, layout.entries[0].mig_devices) == ("all-1g", {"1g.10gb": 7})
    assert "not given: MIG layout" not in capsys.readouterr().out
    main(["validate"])
    assert "not given: MIG layout (--expect-mig-config FILE --expect-mig-name NAME" in (
        capsys.readouterr().out)  # fmt: skip
    assert main(["validate", "--expect-mig-config", str(path), "--expect-mig-name", "x"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"gpunode: error: {path}: no config 'x' under mig-configs; accepted: all-1g"]  # fmt: skip
