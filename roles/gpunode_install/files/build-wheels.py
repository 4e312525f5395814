"""gpunode's wheels on the controller: the one recipe for them.

    PYTHON build-wheels.py PROJECT OUT

Builds gpunode's wheel from the source tree PROJECT with PYTHON's pip (`pip wheel --no-deps
--no-build-isolation`) and, when OUT does not hold it yet, downloads the nvidia-ml-py that
PROJECT/requirements-dev.txt pins. Prints JSON: {"wheels": [names in OUT], "downloaded":
[names]}. A failure is one line on stderr, exit 1; bad arguments exit 2.

Used by gpunode_install (tasks/build.yml) and by the simulator (gpunode.sim.cluster
.Artifacts), which installs gpunode on simulated nodes exactly as the role does: one recipe,
so the same tree gives both the same bytes and a provisioning run finds a simulated node's
gpunode current.

- Reproducible: SOURCE_DATE_EPOCH is fixed, so the zip timestamps (and the wheel's sha256)
  depend on the tree's content only.
- setuptools builds in PROJECT/build/lib and never removes what the source no longer has (a
  moved or deleted module would ship from there), so it is removed first.
- Builds side by side (molecule scenarios, the simulator, the role) take turns on one lock,
  PROJECT/build/.wheel-build.lock (flock), held for the whole script.
- Wheels land in OUT by rename (a reader never sees half a file); gpunode wheels of another
  name (an older version) and nvidia-ml-py wheels other than the pinned one are removed, so
  OUT holds exactly the wheels to install.
"""

import fcntl
import fnmatch
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip file can hold
LOCK = os.path.join("build", ".wheel-build.lock")  # relative to the project


class Failed(Exception):
    pass


def pip(args, what):
    env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        last = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
        raise Failed(f"{what} failed (pip exit {proc.returncode}): {last}")


def pinned_nvml(project):
    """The requirement for nvidia-ml-py (requirements-dev.txt's pin) and its exact version."""
    try:
        with open(os.path.join(project, "requirements-dev.txt"), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("nvidia-ml-py=="):
            req = line.split("#", 1)[0].strip()
            return req, req.split("==", 1)[1].strip()
    return "nvidia-ml-py", None


def place(tmp, out, pattern):
    """Move the wheels matching pattern from tmp into out; remove others matching it there."""
    new = sorted(os.path.basename(w) for w in glob.glob(os.path.join(tmp, pattern)))
    for name in new:
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    for old in glob.glob(os.path.join(out, pattern)):
        if os.path.basename(old) not in new:
            os.unlink(old)
    return new


def build(project, out):
    downloaded = []
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".build-") as tmp:
        shutil.rmtree(os.path.join(project, "build", "lib"), ignore_errors=True)
        pip(["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp, project],
            "building the gpunode wheel")  # fmt: skip
        if not place(tmp, out, "gpunode-*.whl"):
            raise Failed(f"pip built no gpunode-*.whl from {project}")
        req, version = pinned_nvml(project)
        want = f"nvidia_ml_py-{version or '*'}-*.whl"
        if not glob.glob(os.path.join(out, want)):
            pip(["download", "--no-deps", "-q", "-d", tmp, req], f"downloading {req}")
            downloaded = place(tmp, out, "nvidia_ml_py-*.whl")
        for old in glob.glob(os.path.join(out, "nvidia_ml_py-*.whl")):
            if not fnmatch.fnmatch(os.path.basename(old), want):  # another pin's
                os.unlink(old)
    wheels = sorted(os.path.basename(w) for w in glob.glob(os.path.join(out, "*.whl")))
    return {"wheels": wheels, "downloaded": downloaded}


def main(argv):
    if len(argv) != 2:
        print("usage: python3 build-wheels.py PROJECT OUT", file=sys.stderr)
        return 2
    project, out = (os.path.abspath(a) for a in argv)
    if not os.path.isfile(os.path.join(project, "pyproject.toml")):
        print(f"build-wheels: {project} is not gpunode's source tree (no pyproject.toml)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        os.makedirs(os.path.join(project, "build"), exist_ok=True)
        with open(os.path.join(project, LOCK), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = build(project, out)
    except Failed as exc:
        print(f"build-wheels: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"build-wheels: {exc.filename or out}: {exc.strerror}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
