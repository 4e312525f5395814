"""Create an OCI bundle on a simulated node (runs inside the node with its python3).

usage: make_bundle.py BUNDLE ROOTFS ENV_JSON [ARGS_JSON]
The rootfs is hard-link copied (cp -al) so each bundle starts clean but costs nothing.
"""

import json
import os
import shutil
import subprocess
import sys

bundle, rootfs, env_json = sys.argv[1:4]
args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else ["python3", "/opt/probe.py"]
if os.path.exists(bundle):
    shutil.rmtree(bundle)
os.makedirs(bundle)
subprocess.run(["cp", "-al", rootfs, os.path.join(bundle, "rootfs")], check=True)
subprocess.run(["runc", "spec"], cwd=bundle, check=True)
with open(os.path.join(bundle, "config.json")) as fh:
    spec = json.load(fh)
spec["process"]["terminal"] = False
spec["process"]["args"] = args
spec["process"]["env"] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONPATH=/opt/pynvml",
    *json.loads(env_json),
]
spec["root"]["readonly"] = False
with open(os.path.join(bundle, "config.json"), "w") as fh:
    json.dump(spec, fh, indent=1)
