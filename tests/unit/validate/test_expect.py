from __future__ import annotations

import pytest

from gpunode.validate.expect import BadInput, build, read_vars


def test_nothing_given_validates_what_it_can():
    e = build()
    assert (e.gpus, e.driver_pin, e.cuda, e.policy, e.engine) == (
        None,
        None,
        [],
        "strict",
        "docker",
    )
    assert [m.split(" (")[0] for m in e.missing()] == ["expected GPU count", "driver pin",
                                                  "MIG layout"]


def test_vars_file_with_inventory_names_and_flags_win(tmp_path):
    f = tmp_path / "vars.yml"
    f.write_text(
        "gpunode_expected_gpus: 8\nnvidia_driver_branch: '550'\nnvidia_driver_version: ''\n"
        "cuda_toolkit_versions: ['12.4', '11.8']\ncuda_toolkit_compat_policy: minor\n"
        "gpu_container_runtime_docker_default: true\nansible_host: x\n"
    )
    e = build(vars_file=str(f))
    assert (e.gpus, e.driver_pin, e.cuda, e.policy, e.runtime_default) == (
        8, "550", ["12.4", "11.8"], "minor", True)  # fmt: skip
    e = build(vars_file=str(f), expect_gpus="4", driver_pin="550.163.01", cuda=["12.4"])
    assert (e.gpus, e.driver_pin, e.cuda) == (4, "550.163.01", ["12.4"])
    assert (
        e.sources["gpus"] == "flag"
        and build(vars_file=str(f)).sources["gpus"] == "gpunode_expected_gpus"
    )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"expect_gpus": "four"},
            "--expect-gpus: 'four' is not a GPU count; expected an integer >= 0",
        ),
        ({"expect_gpus": "-1"}, "--expect-gpus: '-1' is not a GPU count"),
        (
            {"driver_pin": "535.x"},
            "--driver-pin: '535.x' is not a driver version (e.g. 535.261.03) or branch",
        ),
        ({"cuda": ["twelve"]}, "--cuda: 'twelve' is not a CUDA version"),
        ({"policy": "loose"}, "'loose' is not one of strict, minor, forward"),
        ({"engine": "lxc"}, "--engine: 'lxc' is not one of docker, podman, cri, none"),
        ({"runtime_name": "a b"}, "--runtime-name: 'a b' is not a runtime name (letters, digits"),
    ],
)
def test_bad_values_are_one_line(kw, message):
    with pytest.raises(BadInput) as exc:
        build(**kw)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_bad_vars_files(tmp_path):
    with pytest.raises(BadInput, match=r"--vars .*/nope.yml: cannot read \(No such file"):
        build(vars_file=str(tmp_path / "nope.yml"))
    bad = tmp_path / "bad.yml"
    bad.write_text("a: [1\n")
    with pytest.raises(BadInput, match="not valid YAML/JSON"):
        build(vars_file=str(bad))
    bad.write_text("- 1\n")
    with pytest.raises(BadInput, match="expected a mapping of variables, got list"):
        build(vars_file=str(bad))
    bad.write_text("gpunode_expected_gpus: true\n")
    with pytest.raises(BadInput, match="gpunode_expected_gpus: True is not a GPU count"):
        build(vars_file=str(bad))
    bad.write_text("container_engine_runtime_default: maybe\n")
    with pytest.raises(
        BadInput, match="container_engine_runtime_default: 'maybe' is not a boolean"
    ):
        build(vars_file=str(bad))


def stdin(monkeypatch, data: bytes, tty: bool = False) -> None:
    """Standard input holding ``data`` (a terminal when ``tty``)."""
    import io
    import sys

    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(stream, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stdin", stream)


def test_vars_from_standard_input(monkeypatch):
    """--vars - (what playbooks/validate.yml uses): the same mapping, read from stdin."""
    stdin(monkeypatch, b'{"gpunode_expected_gpus": 2, "cuda_toolkit_versions": ["12.4"], '
                       b'"gpunode_validate_engine": "podman", "ansible_host": "x"}\n')  # fmt: skip
    e = build(vars_file="-")
    assert (e.gpus, e.cuda, e.engine) == (2, ["12.4"], "podman")
    assert e.sources["gpus"] == "gpunode_expected_gpus"
    stdin(monkeypatch, b"nvidia_driver_branch: '550'\n")  # YAML too
    assert build(vars_file="-").driver_pin == "550"


@pytest.mark.parametrize(
    ("data", "tty", "message"),
    [
        (b"a: [1\n", False, "--vars -: not valid YAML/JSON ("),
        (b'{"a": 1', False, "--vars -: not valid YAML/JSON ("),
        (b"[1, 2]\n", False, "--vars -: expected a mapping of variables, got list"),
        (b"\xff\xfe", False, "--vars -: cannot read ("),
        (b'{"gpunode_expected_gpus": "x"}', False, "gpunode_expected_gpus: 'x' is not a GPU count"),
        (b"", True, "--vars -: standard input is a terminal; pipe the variables in"),
    ],
)
def test_bad_vars_on_standard_input_is_one_line(monkeypatch, data, tty, message):
    stdin(monkeypatch, data, tty)
    with pytest.raises(BadInput) as exc:
        build(vars_file="-")
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 5000, "nested deeper than 64 levels"),
        ('{"a": ' + "[" * 100_000, "nested too deeply"),  # JSON
        (
            "a: &a {k: 1}\n"
            + "".join(
                f"b{i}: &b{i} {{<<: ["
                + ", ".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 9)
                + "]}\n"
                for i in range(12)
            ),
            "merge keys copy more than 100000 pairs",
        ),
    ],
    ids=["yaml-nesting", "json-nesting", "merge-bomb"],
)
def test_hostile_vars_files_are_one_line(tmp_path, text, why):
    """Before: yaml.safe_load raised RecursionError (a traceback) on 5,000 '[' and copied
    9**12 pairs for the merge bomb; now each is the one BadInput line."""
    path = tmp_path / "vars.yml"
    path.write_text(text)
    with pytest.raises(BadInput) as exc:
        read_vars(str(path))
    assert why in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "text, wanted",
    [
        ("container_engine_runtime_default: true\n", True),
        ("gpu_container_runtime_docker_default: true\n", True),
        # the gpu_container_runtime role's own name wins over the engine role's, as the
        # role reads them: the engine name true, the role's false leaves runc the default
        ("container_engine_runtime_default: true\ngpu_container_runtime_docker_default: false\n",
         False),
        ("container_engine_runtime_default: false\ngpu_container_runtime_docker_default: true\n",
         True),
        ("gpunode_expected_gpus: 1\n", False),
    ],
)
def test_runtime_default_reads_the_roles_name_first(tmp_path, text, wanted):
    f = tmp_path / "vars.yml"
    f.write_text(text)
    assert build(vars_file=str(f)).runtime_default is wanted


def _alias_bomb(levels: int) -> str:
    """A list of nine aliases per level (flow style, one line): a few hundred bytes that
    boundedyaml loads as ~100 nodes, and 9**levels strings when shown or str()'d whole."""
    text = "&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"
    for i in range(1, levels + 1):
        text = f"&l{i} [{text}, " + ", ".join([f"*l{i - 1}"] * 8) + "]"
    return text


BOMB = _alias_bomb(9)  # ~480 bytes; 9**10 'lol's (~26 GB as text) if expanded

BOUNDED_VALIDATE = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_CPU, (10, 10))
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from gpunode.cli.main import main
sys.exit(main(["validate", "--vars", sys.argv[1]]))
"""


L9 = "[[[[[[[[[['lol', 'lol'"  # the bomb's start, as describe shows it


BOMBS = [
    (f"gpunode_expected_gpus: {BOMB}\n", f"gpunode_expected_gpus: {L9}",
     "is not a GPU count; expected an integer >= 0"),
    (f"nvidia_driver_version: {BOMB}\n", f"nvidia_driver_version: {L9}",
     "is not a driver version (e.g. 535.261.03) or branch (e.g. 535)"),
    (f"nvidia_driver_branch: {BOMB}\n", f"nvidia_driver_branch: {L9}",
     "is not a driver version (e.g. 535.261.03) or branch (e.g. 535)"),
    (f"cuda_toolkit_versions: {BOMB}\n", f"cuda_toolkit_versions: {L9[1:]}",
     "is not a CUDA version (e.g. 12.4) or a list of them"),
    (f"cuda_toolkit_versions: [{BOMB}]\n", f"cuda_toolkit_versions: {L9}",
     "is not a CUDA version (e.g. 12.4) or a list of them"),
    (f"cuda_toolkit_compat_policy: {BOMB}\n", f"cuda_toolkit_compat_policy: {L9}",
     "is not one of strict, minor, forward"),
    (f"container_engine_runtime_default: {BOMB}\n",
     f"container_engine_runtime_default: {L9}", "is not a boolean; expected true or false"),
    (f"container_engine_runtime_name: {BOMB}\n", f"container_engine_runtime_name: {L9}",
     "is not a runtime name (letters, digits, - _ .)"),
    (f"gpunode_validate_engine: {BOMB}\n", f"gpunode_validate_engine: {L9}",
     "is not one of docker, podman, cri, none"),
    (f"gpu_mig_config: {BOMB}\n", f"gpu_mig_config: {L9}",
     "is not a config name; expected a string"),
    (f"gpu_mig_config: x\ngpu_mig_config_path: {BOMB}\n", f"gpu_mig_config_path: {L9}",
     "is not a file's path"),
    # bounded before (gpunode.mig.config shows values with describe): kept so
    (f"gpu_mig_config: x\ngpu_mig_configs: {{x: {BOMB}}}\n",
     f"mig-configs.x[0]: {L9[1:]}", "is not accepted; accepted: a mapping with keys"),
]


@pytest.mark.parametrize(
    ("text", "shown", "accepted"), BOMBS, ids=[shown.split(":")[0] for _, shown, _ in BOMBS]
)
def test_alias_bomb_in_vars_is_one_line_within_bounds(tmp_path, text, shown, accepted):
    """Each key with a nine-alias-per-level bomb as its value, validate in a fresh process
    under 512 MiB of address space and 10 s of CPU: boundedyaml loads it (~100 nodes), and
    before, validate's own messages ({value!r}) and conversions (str()) expanded it: a
    MemoryError's traceback or the CPU limit. Now one line naming the key, the value's
    start and size, and what is accepted; exit 2 before anything is checked."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import gpunode

    path = tmp_path / "vars.yml"
    path.write_text(text)
    assert path.stat().st_size < 600
    src = str(Path(gpunode.__file__).parents[1])  # this checkout's code, as pytest imports it
    proc = subprocess.run(
        [sys.executable, "-c", BOUNDED_VALIDATE, str(path)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err[-600:])
    assert proc.stdout == "" and err.count("\n") == 1 and len(err) < 400, err[:400]
    assert err.startswith(f"gpunode: error: {shown}") and "... (a list of 9 items) " in err, err
    assert accepted in err, err


@pytest.mark.parametrize(
    "key",
    ["gpunode_expected_gpus", "nvidia_driver_version", "cuda_toolkit_versions",
     "cuda_toolkit_compat_policy", "container_engine_runtime_name", "gpunode_validate_engine",
     "container_engine_runtime_default"],
)  # fmt: skip
def test_long_string_in_vars_is_shown_by_its_start(tmp_path, key):
    """A 500,000-character string (within boundedyaml's 1 MiB) was the whole message line."""
    path = tmp_path / "vars.yml"
    path.write_text(f"{key}: '{'x/' * 250_000}'\n")
    with pytest.raises(BadInput) as exc:
        build(vars_file=str(path))
    line = str(exc.value)
    assert line.startswith(f"{key}: 'x/x/") and "(a string of 500000 characters)" in line
    assert len(line) < 200 and "\n" not in line, line[:300]
