# Runs gpunode from the wheels in a directory (zipimport), before and while it is installed:
#   python3 -c "<this file>" WHEEL_DIR [gpunode arguments ...]
# gpu_preflight runs its checks this way and gpunode_install its `provision install`.
# With GPUNODE_WHEELS_SHA256 set (JSON: wheel file name -> sha256, the controller's wheels)
# the directory must hold exactly those wheels, or this prints why and exits 3: the role then
# copies them and runs again, so a node whose wheels are current costs no copy at all.
import glob
import hashlib
import json
import os
import sys

wheel_dir = sys.argv.pop(1)
wheels = sorted(glob.glob(os.path.join(wheel_dir, "*.whl")))
want = os.environ.get("GPUNODE_WHEELS_SHA256")
if want is not None:
    have = {os.path.basename(w): hashlib.sha256(open(w, "rb").read()).hexdigest() for w in wheels}
    if have != json.loads(want):
        print(json.dumps({"ok": False, "message": "the wheels in %s are not the controller's" % wheel_dir}))
        sys.exit(3)
sys.path[:0] = wheels
from gpunode.cli.main import main  # noqa: E402

sys.exit(main())
