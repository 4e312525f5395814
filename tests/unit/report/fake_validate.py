"""A stand-in for `gpunode validate --json` on a node (ansible_connection=local): prints a
synthetic result for the host named in FAKE_NODE, or fails as told; logs its argv and the
expectations it was given (--vars FILE, or - for standard input)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
from tests.unit.report.synthetic import cluster

node = sys.argv[1]
argv = sys.argv[2:]
expect = None
if "--vars" in argv:
    path = argv[argv.index("--vars") + 1]
    if path == "-":
        expect = json.load(sys.stdin)
    else:
        with open(path) as fh:
            expect = json.load(fh)
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps({"node": node, "argv": argv, "vars": expect}) + "\n")
if node == "n-broken":
    print("gpunode: error: --engine docker: docker is not installed on this node", file=sys.stderr)
    sys.exit(2)
docs = {"n-a100": "sim-a100-bookworm.json", "n-t4": "sim-t4-bookworm.json"}
doc = cluster()[docs[node]]
doc["node"] = "hostname-" + node  # the report names nodes as the inventory does
print(json.dumps(doc))
sys.exit(doc["exit_code"])
