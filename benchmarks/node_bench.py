"""Timing loops run *inside* a simulated node, with the node's own python3.

usage: node_bench.py docker IMAGE RUNS
       node_bench.py podman IMAGE RUNS
       node_bench.py breakdown IMAGE RUNS
       node_bench.py default-runtime IMAGE RUNS
       node_bench.py lifecycle IMAGE RUNS

docker:    `docker run --rm IMAGE true` for runc and gpunode's variants.
podman:    `podman run --rm IMAGE true` without and with a CDI device (nvidia.com/gpu=1).
breakdown: runc itself on one OCI bundle made from IMAGE: `runc create` (then an untimed
           `runc delete`) of the plain spec, of the spec as gpunode edits it (one GPU) with and without the
           hooks gpunode added, and gpunode-container-runtime's own create on that bundle;
           then the runtime's create with log-level debug (its timing lines), and
           `python3 -IS -c pass` as a reference.
default-runtime: `docker run --rm IMAGE true` with no --runtime (and, as controls, with
           --runtime runc and --runtime gpunode) while daemon.json's "default-runtime" is
           runc, then gpunode, in alternating blocks (Docker restarted before each block,
           daemon.json put back at the end); keys "<default>: <variant>".
lifecycle: the runtime calls a container without a GPU request costs, as containerd's shim
           makes them (`create`, `start`, `delete -f`), on one bundle of IMAGE, through runc
           and through gpunode-container-runtime (its sh first stage), interleaved; then
           one `state` call through each, 500 rounds ("call").

Variants are interleaved (round-robin) after one warm-up run each, so drift in machine load
hits them equally. Prints JSON on stdout: {"times": {variant: [seconds, ...]}}; breakdown
adds "timing" (the runtime's timing lines) and "hooks" (how many hook entries gpunode added
to the spec). A failure ends it with one line on stderr.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

DOCKER = {
    "runc": ["--runtime", "runc"],
    "gpunode, no GPU request": ["--runtime", "gpunode"],
    "gpunode, one GPU": ["--runtime", "gpunode", "-e", "NVIDIA_VISIBLE_DEVICES=0"],
    "gpunode, all GPUs": ["--runtime", "gpunode", "-e", "NVIDIA_VISIBLE_DEVICES=all"],
}
# The node is itself a container: podman must use cgroupfs (no systemd user session).
PODMAN = ["podman", "--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "none"]
PODMAN_VARIANTS = {"podman": [], "podman, CDI nvidia.com/gpu=1": ["--device", "nvidia.com/gpu=1"]}

WORK = "/var/lib/gpunode-bench"
ROOTFS = f"{WORK}/rootfs"
RUNTIME = "gpunode-container-runtime"  # the first stage on PATH, as Docker runs it
# Only for the timing lines, with its own first-stage file and parsed-config cache: the
# node's runtime.toml (the role's, see bench_runtime.py), its /run/gpunode/first-stage and
# its cached parse stay as Docker uses them. (One shared cache would flip between the two
# files' texts in the interleaved loop: a tomllib parse on every create, ~10 ms.)
DEBUG_CONFIG = f"{WORK}/runtime-debug.toml"
DEBUG_LOG = f"{WORK}/runtime-debug.log"
DEBUG_FIRST_STAGE = f"{WORK}/first-stage-debug"
DEBUG_CONFIG_CACHE = f"{WORK}/runtime-debug-toml.json"


def run(cmd, **kw):
    """Run cmd; on failure raise with its last stderr line (the benchmark prints it)."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    proc = subprocess.run(cmd, **kw)
    if proc.returncode != 0:
        err = proc.stderr
        if not isinstance(err, bytes):  # a file
            err.seek(0)
            err = err.read()
        err = err.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"`{' '.join(cmd)}` exited {proc.returncode}: {(err or [''])[-1]}")
    return proc


def timed(argv, **kw):
    """A variant: a function that runs argv and returns how long it took (seconds)."""

    def fn():
        start = time.perf_counter()
        run(argv, **kw)
        return time.perf_counter() - start

    return fn


def interleave(variants, runs):
    """{name: variant} -> {name: [seconds] * runs}, after one warm-up call each."""
    for fn in variants.values():
        fn()
    times = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            times[name].append(fn())
    return times


def bench_docker(image, runs):
    docker = ["docker", "run", "--rm", "--network", "none"]
    variants = {k: timed([*docker, *a, image, "true"]) for k, a in DOCKER.items()}
    return {"times": interleave(variants, runs)}


DAEMON_JSON = "/etc/docker/daemon.json"
DEFAULT_BLOCKS = 6  # blocks per default runtime, alternating runc, gpunode, runc, ...
DEFAULT_VARIANTS = {
    "docker run IMAGE": [],
    "docker run --runtime runc IMAGE": ["--runtime", "runc"],
    "docker run --runtime gpunode IMAGE": ["--runtime", "gpunode"],
}


def set_default_runtime(name, original):
    """daemon.json as it was, with "default-runtime" NAME; Docker restarted and answering
    with that default."""
    config = dict(original)
    config["default-runtime"] = name
    with open(DAEMON_JSON, "w") as fh:
        json.dump(config, fh, indent=4)
    restart_docker()
    got = run(["docker", "info", "--format", "{{.DefaultRuntime}}"]).stdout.decode().strip()
    if got != name:
        raise SystemExit(f"docker's default runtime is {got!r} after setting {name!r}")


def restart_docker():
    # docker.service allows 3 starts a minute (StartLimitBurst): reset that count first
    subprocess.run(["systemctl", "reset-failed", "docker.service"], capture_output=True)
    run(["systemctl", "restart", "docker"])
    for _ in range(120):
        if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit("docker did not answer within 60 s of its restart")


def bench_default_runtime(image, runs):
    with open(DAEMON_JSON, "rb") as fh:
        saved = fh.read()
    original = json.loads(saved or b"{}")
    docker = ["docker", "run", "--rm", "--network", "none"]
    variants = {k: timed([*docker, *a, image, "true"]) for k, a in DEFAULT_VARIANTS.items()}
    per_block = [
        runs // DEFAULT_BLOCKS + (i < runs % DEFAULT_BLOCKS) for i in range(DEFAULT_BLOCKS)
    ]
    times = {}
    try:
        for n in per_block:
            for default in ("runc", "gpunode"):
                set_default_runtime(default, original)
                for name, samples in interleave(variants, n).items():
                    times.setdefault(f"{default}: {name}", []).extend(samples)
    finally:
        with open(DAEMON_JSON, "wb") as fh:
            fh.write(saved)
        restart_docker()
    return {"times": times, "blocks": DEFAULT_BLOCKS}


def bench_podman(image, runs):
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    run(["podman", "--cgroup-manager", "cgroupfs", "load", "-q"], stdin=save.stdout)
    save.wait()
    variants = {k: timed([*PODMAN, *a, image, "true"]) for k, a in PODMAN_VARIANTS.items()}
    return {"times": interleave(variants, runs)}


# ----------------------------------------------------------------------------- breakdown


def write_spec(bundle, spec):
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "config.json"), "w") as fh:
        json.dump(spec, fh)


def base_spec(image):
    """runc's default spec for IMAGE's exported rootfs (shared by every bundle)."""
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(ROOTFS)
    cid = run(["docker", "create", image]).stdout.decode().strip()
    export = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
    run(["tar", "-x", "-C", ROOTFS], stdin=export.stdout)
    export.wait()
    run(["docker", "rm", cid])
    run(["runc", "spec"], cwd=WORK)
    with open(f"{WORK}/config.json") as fh:
        spec = json.load(fh)
    spec["process"].update(terminal=False, args=["true"])
    spec["process"]["env"] = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    spec["root"] = {"path": ROOTFS, "readonly": False}  # as Docker gives it
    return spec


class Ids:
    """Container ids unique on the machine: nodes share the host's cgroup hierarchy."""

    def __init__(self):
        self.prefix, self.n = f"bench-{socket.gethostname()}-{os.getpid()}", 0

    def __call__(self):
        self.n += 1
        return f"{self.prefix}-{self.n}"


def create_delete(runtime, bundle, ids, env=None, prepare=None):
    """A variant: `RUNTIME create` (timed) then `runc delete -f` (not timed: it is the same
    for every spec and its ~100 ms of waiting would only add noise). `prepare` runs first,
    untimed."""

    def fn():
        if prepare:
            prepare()
        cid = ids()
        # runc hands its stdio to the container: no pipes, they would stay open until delete
        with tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            try:
                run(
                    # --pid-file as Docker and containerd pass it: without one the resident
                    # service leaves the create to the Python runtime (gpunode.launch.resident)
                    [runtime, "create", "--pid-file", f"{bundle}/{cid}.pid", "--bundle", bundle,
                     cid],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
                return time.perf_counter() - start
            finally:
                subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
                if os.path.exists(f"{bundle}/{cid}.pid"):
                    os.unlink(f"{bundle}/{cid}.pid")

    return fn


def added_hooks(edited, plain):
    """Hook entries in `edited` that `plain` does not have: {stage: [hook, ...]}."""
    base = plain.get("hooks") or {}
    out = {}
    for stage, hooks in (edited.get("hooks") or {}).items():
        extra = [h for h in hooks if h not in (base.get(stage) or [])]
        if extra:
            out[stage] = extra
    return out


def without_hooks(spec, hooks):
    """A copy of `spec` without the hook entries `hooks` (from added_hooks)."""
    spec = json.loads(json.dumps(spec))
    if not hooks:
        return spec
    for stage, extra in hooks.items():
        spec["hooks"][stage] = [h for h in spec["hooks"][stage] if h not in extra]
    spec["hooks"] = {k: v for k, v in spec["hooks"].items() if v}
    if not spec["hooks"]:
        del spec["hooks"]
    return spec


def without_ldcache(spec, hooks):
    """A copy of `spec` whose gpunode-hook does no ld cache (its `--folder DIR` pairs
    dropped), or None when no added hook has any."""
    spec = json.loads(json.dumps(spec))
    found = False
    for stage, extra in hooks.items():
        for hook in spec["hooks"][stage]:
            if hook in extra and "--folder" in hook.get("args", []):
                args, kept = hook["args"], []
                for i, arg in enumerate(args):
                    if arg != "--folder" and (i == 0 or args[i - 1] != "--folder"):
                        kept.append(arg)
                hook["args"], found = kept, True
    return spec if found else None


def timing_lines():
    """The runtime's `timing create` lines so far (log-level debug)."""
    try:
        with open(DEBUG_LOG) as fh:
            return [line.strip() for line in fh if "timing create " in line]
    except FileNotFoundError:
        return []


def lifecycle(runtime, bundle, ids):
    """A variant: `RUNTIME create`, `start`, `delete -f` of one container, timed together."""

    def fn():
        cid = ids()
        with tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            try:
                for call in (["create", "--bundle", bundle, cid], ["start", cid]):
                    run([runtime, *call], stdout=subprocess.DEVNULL, stderr=err)
                run([runtime, "delete", "-f", cid], stdout=subprocess.DEVNULL, stderr=err)
                return time.perf_counter() - start
            finally:
                subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
                if os.path.exists(f"{bundle}/{cid}.pid"):
                    os.unlink(f"{bundle}/{cid}.pid")

    return fn


CALL_ROUNDS = 500  # one runtime call is ~4 ms: many rounds for a sub-ms difference


def bench_lifecycle(image, runs):
    write_spec(f"{WORK}/plain", base_spec(image))
    ids = Ids()
    variants = {
        "runc": lifecycle("runc", f"{WORK}/plain", ids),
        "gpunode-container-runtime": lifecycle(RUNTIME, f"{WORK}/plain", ids),
    }
    # One call that is not a create (`state` of no container: both exit 1 after the same
    # work), for what the first stage adds to every call.
    call = {}
    for name, exe in (("runc", "runc"), ("gpunode-container-runtime", RUNTIME)):
        argv = [exe, "state", "gpunode-bench-no-such-container"]

        def fn(argv=argv):
            start = time.perf_counter()
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
            return time.perf_counter() - start

        call[name] = fn
    return {"times": interleave(variants, runs), "call": interleave(call, CALL_ROUNDS)}


def bench_breakdown(image, runs):
    plain = base_spec(image)
    request = json.loads(json.dumps(plain))
    request["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
    ids = Ids()
    # The spec as gpunode edits it: let the runtime edit one bundle, keep its config.json.
    write_spec(f"{WORK}/edited", request)
    create_delete(RUNTIME, f"{WORK}/edited", ids)()
    with open(f"{WORK}/edited/config.json") as fh:
        edited = json.load(fh)
    hooks = added_hooks(edited, plain)
    write_spec(f"{WORK}/plain", plain)
    write_spec(f"{WORK}/nohook", without_hooks(edited, hooks))
    noldcache = without_ldcache(edited, hooks)
    if noldcache:
        write_spec(f"{WORK}/noldcache", noldcache)
    # Does this runtime write timing lines? One create at log-level debug says.
    with open(DEBUG_CONFIG, "w") as fh:
        fh.write(f'log-level = "debug"\nlog-file = "{DEBUG_LOG}"\n')
    debug_env = dict(
        os.environ,
        GPUNODE_RUNTIME_CONFIG=DEBUG_CONFIG,
        GPUNODE_RUNTIME_FIRST_STAGE=DEBUG_FIRST_STAGE,
        GPUNODE_RUNTIME_CONFIG_CACHE=DEBUG_CONFIG_CACHE,
    )
    write_spec(f"{WORK}/debug", request)
    create_delete(RUNTIME, f"{WORK}/debug", ids, debug_env)()
    writes_timing = bool(timing_lines())
    open(DEBUG_LOG, "w").close()

    def runtime_create(bundle, env=None):
        # the runtime edits config.json in place: each run starts from the request again
        return create_delete(RUNTIME, bundle, ids, env, lambda: write_spec(bundle, request))

    variants = {
        "runc, plain spec": create_delete("runc", f"{WORK}/plain", ids),
        "runc, edited spec without hooks": create_delete("runc", f"{WORK}/nohook", ids),
        "runc, edited spec": create_delete("runc", f"{WORK}/edited", ids),
        "runc, edited spec, hook without ld cache": create_delete("runc", f"{WORK}/noldcache", ids),
        "gpunode-container-runtime": runtime_create(f"{WORK}/shim"),
        "gpunode-container-runtime, log-level debug": runtime_create(f"{WORK}/debug", debug_env),
        "python3 -IS -c pass": timed(["python3", "-IS", "-c", "pass"]),
    }
    if not hooks:
        del variants["runc, edited spec"]  # the same spec as the one without hooks
    if not noldcache:
        del variants["runc, edited spec, hook without ld cache"]
    if not writes_timing:
        del variants["gpunode-container-runtime, log-level debug"]
    times = interleave(variants, runs)
    timing = timing_lines()[1:]  # the first is the warm-up's
    return {"times": times, "timing": timing, "hooks": sum(map(len, hooks.values()))}


def main():
    mode, image, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fn = {
        "docker": bench_docker,
        "podman": bench_podman,
        "breakdown": bench_breakdown,
        "default-runtime": bench_default_runtime,
        "lifecycle": bench_lifecycle,
    }[mode]
    print(json.dumps(fn(image, runs)))


if __name__ == "__main__":
    main()
