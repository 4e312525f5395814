"""`gpunode watch cordon` against a fake kubectl (a script that records its argv and exits
as told): the commands each verdict calls for, run as argv lists, nothing on OK or unknown,
the uncordon only of gpunode's own taint, one line and exit 1 when kubectl fails, one line
and exit 2 for bad input (before anything runs)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from gpunode.cli.main import main
from gpunode.watch import cordon

from .states import FAILING_LINE, HEALTHY_LINE, write_state

TAINT = "gpunode.io/gpu-unhealthy=true:NoSchedule"
FAKE = f"""#!{sys.executable}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "argv.jsonl"), "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
verb = sys.argv[3] if len(sys.argv) > 3 else ""
fail = os.path.join(here, "fail-" + verb)
if os.path.exists(fail):
    print("some progress", file=sys.stderr)
    print(open(fail).read(), file=sys.stderr)
    sys.exit(1)
if verb == "get":
    with open(os.path.join(here, "node.json")) as fh:
        print(fh.read())
else:
    print("node/n1 " + verb + "ed")
"""


class Kube:
    def __init__(self, root: Path) -> None:
        self.dir = root / "kube"
        self.dir.mkdir()
        self.kubectl = self.dir / "kubectl"
        self.kubectl.write_text(FAKE)
        self.kubectl.chmod(self.kubectl.stat().st_mode | stat.S_IXUSR)
        self.kubeconfig = root / "kubeconfig"
        self.kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
        self.node(taints=[])

    def node(self, taints: list[dict], unschedulable: bool = False) -> None:
        doc = {"kind": "Node", "metadata": {"name": "n1"},
               "spec": {"taints": taints, "unschedulable": unschedulable}}  # fmt: skip
        (self.dir / "node.json").write_text(json.dumps(doc))

    def fail(self, verb: str, line: str) -> None:
        (self.dir / f"fail-{verb}").write_text(line)

    def calls(self) -> list[list[str]]:
        log = self.dir / "argv.jsonl"
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

    def args(self, state_dir: Path, *extra: str) -> list[str]:
        return ["watch", "cordon", "--kubeconfig", str(self.kubeconfig), "--k8s-node", "n1",
                "--state-dir", str(state_dir), "--kubectl", str(self.kubectl), *extra]  # fmt: skip

    def kc(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig)]


@pytest.fixture
def kube(tmp_path) -> Kube:
    return Kube(tmp_path)


@pytest.fixture
def failing(tmp_path) -> Path:
    return write_state(tmp_path / "failing", failing=True)


@pytest.fixture
def healthy(tmp_path) -> Path:
    return write_state(tmp_path / "healthy", failing=False)


def run(capsys, args: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_problem_cordons_and_taints_the_node_with_exact_argv(kube, failing, capsys):
    code, out, err = run(capsys, kube.args(failing))
    assert code == 0 and err == ""
    assert kube.calls() == [
        [*kube.kc(), "cordon", "n1"],
        [*kube.kc(), "taint", "nodes", "n1", TAINT, "--overwrite"],
    ]
    assert out == f"n1: cordoned and tainted {TAINT} ({FAILING_LINE})\n"
    # a rerun is the same two idempotent commands (kubectl: already cordoned, --overwrite)
    assert run(capsys, kube.args(failing))[0] == 0 and len(kube.calls()) == 4


def test_the_taint_given_is_the_one_set(kube, failing, capsys):
    code, _out, _err = run(capsys, kube.args(failing, "--taint", "example.com/gpu=bad:NoExecute"))
    assert code == 0
    assert kube.calls()[1] == [*kube.kc(), "taint", "nodes", "n1", "example.com/gpu=bad:NoExecute",
                               "--overwrite"]  # fmt: skip


def test_dry_run_prints_exactly_the_commands_and_runs_nothing(kube, failing, capsys):
    code, out, err = run(capsys, kube.args(failing, "--dry-run"))
    assert code == 0 and kube.calls() == []
    k, c = str(kube.kubectl), str(kube.kubeconfig)
    assert out.splitlines() == [
        f"{k} --kubeconfig {c} cordon n1",
        f"{k} --kubeconfig {c} taint nodes n1 {TAINT} --overwrite",
    ]
    assert err == f"gpunode watch cordon: dry run: n1: would cordon and taint {TAINT} " \
        f"({FAILING_LINE})\n"  # fmt: skip


def test_healthy_does_nothing_and_never_uncordons_by_default(kube, healthy, capsys):
    kube.node([{"key": "gpunode.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"}], True)
    code, out, err = run(capsys, kube.args(healthy))
    assert (code, err) == (0, "") and kube.calls() == []
    assert out.startswith(f"n1: healthy ({HEALTHY_LINE}); nothing done") and out.count("\n") == 1


def test_unknown_does_nothing_and_says_so(kube, tmp_path, capsys):
    code, out, err = run(capsys, kube.args(tmp_path / "no-state", "--uncordon-when-healthy"))
    assert (code, err) == (0, "") and kube.calls() == []
    assert out == "n1: verdict unknown (gpunode watch: no state (is gpunode-watch running?)); " \
        "nothing done\n"  # fmt: skip


def test_uncordon_when_healthy_undoes_only_its_own_taint(kube, healthy, capsys):
    get = [*kube.kc(), "get", "node", "n1", "-o", "json"]
    # cordoned by an operator (no gpunode taint): read, left as it is
    kube.node([{"key": "maintenance", "value": "x", "effect": "NoSchedule"}], True)
    code, out, _ = run(capsys, kube.args(healthy, "--uncordon-when-healthy"))
    assert code == 0 and kube.calls() == [get]
    assert "no gpunode.io/gpu-unhealthy taint, so left as it is" in out
    # gpunode's own taint (recognised by its key): removed, then uncordoned
    kube.node([{"key": "maintenance", "value": "x", "effect": "NoSchedule"},
               {"key": "gpunode.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"}],
              True)  # fmt: skip
    code, out, _ = run(capsys, kube.args(healthy, "--uncordon-when-healthy"))
    assert code == 0
    assert kube.calls()[1:] == [
        get,
        [*kube.kc(), "taint", "nodes", "n1", "gpunode.io/gpu-unhealthy-"],
        [*kube.kc(), "uncordon", "n1"],
    ]
    assert out.endswith("removed the gpunode.io/gpu-unhealthy taint and uncordoned\n")
    # dry run: the node read (a read), the two commands printed, not run
    code, out, err = run(capsys, kube.args(healthy, "--uncordon-when-healthy", "--dry-run"))
    assert code == 0 and kube.calls()[4:] == [get]
    assert "would remove the gpunode.io/gpu-unhealthy taint and uncordon" in err
    assert [line.split(" ", 3)[3] for line in out.splitlines()] == [
        "taint nodes n1 gpunode.io/gpu-unhealthy-", "uncordon n1"]  # fmt: skip


def test_a_problem_with_uncordon_asked_still_cordons(kube, failing, capsys):
    code, _out, _err = run(capsys, kube.args(failing, "--uncordon-when-healthy"))
    assert code == 0 and [c[2] for c in kube.calls()] == ["cordon", "taint"]


@pytest.mark.parametrize("verb, ran", [("cordon", ["cordon"]), ("taint", ["cordon", "taint"])])
def test_kubectl_failing_is_one_line_exit_1_and_stops(kube, failing, capsys, verb, ran):
    kube.fail(verb, 'Error from server (Forbidden): nodes "n1" is forbidden')
    code, out, err = run(capsys, kube.args(failing))
    assert code == 1 and out == "" and [c[2] for c in kube.calls()] == ran
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"gpunode: error: kubectl {verb} ")
    assert err.endswith('failed (exit 1): Error from server (Forbidden): nodes "n1" is forbidden\n')


def test_kubectl_failing_to_read_the_node_is_one_line_exit_1(kube, healthy, capsys):
    kube.fail("get", "error: You must be logged in to the server (Unauthorized)")
    code, out, err = run(capsys, kube.args(healthy, "--uncordon-when-healthy"))
    assert (code, out) == (1, "") and len(kube.calls()) == 1
    assert err == ("gpunode: error: kubectl get node n1 -o json failed (exit 1): error: You "
                   "must be logged in to the server (Unauthorized)\n")  # fmt: skip


@pytest.mark.parametrize("taint, words", [
    ("gpunode.io/gpu-unhealthy=true", "is not KEY=VALUE:EFFECT"),
    ("gpunode.io/gpu-unhealthy:NoSchedule", "is not KEY=VALUE:EFFECT"),
    ("k=v:NoRun", "effect 'NoRun' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
    ("bad key=v:NoSchedule", "key 'bad key' is not a Kubernetes label key"),
    ("k=v;rm -rf /:NoSchedule", "value 'v;rm -rf /' is not a Kubernetes label value"),
])  # fmt: skip
def test_a_bad_taint_is_one_line_exit_2(kube, failing, capsys, taint, words):
    code, out, err = run(capsys, kube.args(failing, "--taint", taint))
    assert (code, out) == (2, "") and kube.calls() == []
    assert err.count("\n") == 1 and "argument --taint:" in err and words in err


def test_bad_inputs_are_one_line_exit_2_before_anything_runs(kube, failing, tmp_path, capsys):
    args = kube.args(failing)
    missing = args.copy()
    missing[missing.index("--kubeconfig") + 1] = str(tmp_path / "nope")
    code, out, err = run(capsys, missing)
    assert (code, out, kube.calls()) == (2, "", [])
    assert err == f"gpunode: error: --kubeconfig {tmp_path / 'nope'}: no such file (give the " \
        "kubeconfig of the node's cluster, a file)\n"  # fmt: skip
    for kubectl in (str(tmp_path / "no-kubectl"), "no-such-kubectl-here", str(kube.kubeconfig)):
        bad = args.copy()
        bad[bad.index("--kubectl") + 1] = kubectl
        code, out, err = run(capsys, bad)
        assert (code, out) == (2, "") and err.count("\n") == 1
        assert err.startswith(f"gpunode: error: --kubectl {kubectl}: no executable kubectl")
    i = args.index("--k8s-node")
    code, out, err = run(capsys, [*args[:i], "--k8s-node=-rf", *args[i + 2 :]])
    assert (code, out) == (2, "") and "'-rf' is not a Kubernetes node name" in err
    assert kube.calls() == []


def test_the_message_never_reaches_an_argv():
    """The state's text is only in the summary: the commands are the operator's values."""
    taint = cordon.parse_taint(TAINT)
    for verdict in (0, 1, 2):
        for tainted in (False, True):
            for argv in cordon.commands(verdict, "kubectl", "/k", "n1", taint, uncordon=True,
                                        tainted=tainted):  # fmt: skip
                assert set(argv) <= {"kubectl", "--kubeconfig", "/k", "n1", "cordon", "uncordon",
                                     "taint", "nodes", TAINT, "--overwrite",
                                     "gpunode.io/gpu-unhealthy-"}  # fmt: skip


def test_the_default_taint_parses():
    assert cordon.parse_taint(cordon.DEFAULT_TAINT) == (
        "gpunode.io/gpu-unhealthy", "true", "NoSchedule")  # fmt: skip
    assert str(cordon.parse_taint("k=:PreferNoSchedule")) == "k=:PreferNoSchedule"
