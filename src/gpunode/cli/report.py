"""`gpunode report`: the cluster report (HTML page, JUnit XML, merged JSON, Markdown
summary) from `gpunode validate --json` result files or a results file holding every node's
(report/results.py; `-` reads one from standard input), or, with --run, from a validation
run over an inventory through ansible-runner (playbooks/validate.yml), with a line per node.
--run needs the gpunode project (the playbook, its roles, ansible.cfg): --project,
$GPUNODE_PROJECT, or the source tree gpunode runs from; an installed wheel has none.
--previous names the previous report (its directory or report.json) or the previous run's
result files: the page, summary.md and report.json say what changed (each failure new or
resolved per node, check and GPU; nodes newly failing, fixed, added, gone).

Exit codes: 0 report written and every node passed, 1 report written and a node failed (or
the run failed), 2 bad input (result files, inventory, a report directory not writable).
"""

from __future__ import annotations

import argparse
import os
import tempfile

from ..util.command import EXIT_FAIL, EXIT_OK, EXIT_USAGE, UsageError, fail

PLAYBOOK = os.path.join("playbooks", "validate.yml")  # in the project


def checkout(module: str = __file__) -> str | None:
    """The source tree this gpunode runs from (module is src/gpunode/cli/report.py in it), or
    None: installed from a wheel, gpunode has no playbooks beside it."""
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(module))))
    root = os.path.dirname(src)
    if os.path.basename(src) == "src" and os.path.isfile(os.path.join(root, PLAYBOOK)):
        return root
    return None


def project_dir(given: str | None) -> str:
    """The gpunode project --run uses (its playbooks/ and ansible.cfg): --project, else
    $GPUNODE_PROJECT, else the source tree gpunode runs from."""
    project = given or os.environ.get("GPUNODE_PROJECT") or checkout()
    if not project:
        raise UsageError(
            "report: --run needs the gpunode project (playbooks/, roles/, ansible.cfg), which "
            "an installed gpunode does not have: pass --project DIR or set GPUNODE_PROJECT"
        )
    if not os.path.isdir(project):
        raise UsageError(f"report: project {project} is not a directory")
    return os.path.abspath(project)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results",
        nargs="*",
        help="result files (one node's, or gpunode.results/v1: every node's), directories of "
        "*.json, or - for standard input (not with --run)",
    )
    p.add_argument("-o", "--output", default="reports", help="report directory (default: reports)")
    p.add_argument(
        "--run",
        dest="run_validation",
        action="store_true",
        help="run the validation first (ansible-runner)",
    )
    p.add_argument("-i", "--inventory", help="inventory for --run")
    p.add_argument("--limit", help="host pattern for --run")
    p.add_argument(
        "--project",
        help="the gpunode project for --run (default: $GPUNODE_PROJECT, else the source tree "
        "gpunode runs from)",
    )
    p.add_argument(
        "--playbook", help=f"validation playbook for --run (default: PROJECT/{PLAYBOOK})"
    )
    p.add_argument(
        "--previous",
        metavar="PATH",
        help="compare with the previous report: its directory or report.json, or the previous "
        "run's result files (a file or directory); the page, summary.md and report.json say "
        "each failure new or resolved per node, check and GPU, and which nodes newly fail and "
        "which were fixed",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the report path")


def run(args: argparse.Namespace) -> int:
    from ..report import build
    from ..report.results import ResultError

    if args.run_validation:
        if args.results:
            raise UsageError("report: --run takes no result files (it produces them)")
        if not args.inventory:
            raise UsageError("report: --run needs -i INVENTORY")
        if not os.path.exists(args.inventory):
            raise UsageError(f"report: inventory {args.inventory} does not exist")
        project = project_dir(args.project)
        playbook = args.playbook or os.path.join(project, PLAYBOOK)
        if not os.path.isfile(playbook):
            raise UsageError(f"report: playbook {playbook} not found; pass --playbook")
    elif not args.results:
        raise UsageError("report: name result files or directories, or use --run -i INVENTORY")
    if args.previous and not os.path.exists(args.previous):  # before a run, not after it
        raise UsageError(f"report: previous report {args.previous}: no such file or directory")
    try:
        if args.run_validation:
            with tempfile.TemporaryDirectory(prefix="gpunode-validate-") as tmp:
                rc = run_validation(args.inventory, project, playbook, tmp, args.limit, args.quiet)
                if rc is not None:
                    return rc
                model = build.model_from([tmp])
        else:
            model = build.model_from(args.results)
        if args.previous:
            model = build.compare(model, args.previous)
        paths = build.write(model, args.output)
    except (ResultError, build.ReportDirError) as exc:
        return fail(exc, EXIT_USAGE)
    s = model["summary"]
    if not args.quiet:
        verdict = (
            f"{s['nodes_failed']} of {s['nodes']} nodes failed"
            if s["failed"]
            else (f"all {s['nodes']} nodes passed")
        )
        print(f"{verdict}; junit {paths['junit.xml']}, summary {paths['summary.md']}")
        if "changes" in model:
            ch = model["changes"]
            changed = [e["change"] for e in ch.get("failures") or []]
            print(f"since the previous report: {changed.count('new')} new failure(s), "
                  f"{changed.count('resolved')} resolved (per check and GPU); "
                  f"{len(ch['new'])} node(s) newly failing, {len(ch['fixed'])} fixed")  # fmt: skip
    print(f"report: {paths['index.html']}")
    return EXIT_FAIL if s["failed"] else EXIT_OK


def run_validation(
    inventory: str, project: str, playbook: str, results: str, limit, quiet: bool
) -> int | None:
    """Run the validation playbook into ``results`` (report.run), a line per node unless
    quiet; None when it ran, an exit code when it could not."""
    from ..report.run import validation

    def on_line(line: str) -> None:
        if not quiet:
            print(line, flush=True)

    failed = validation(inventory, project, playbook, results, limit, on_line)
    if failed is None:
        return None
    return fail(failed, EXIT_FAIL)
