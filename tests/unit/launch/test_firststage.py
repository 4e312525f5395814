"""`gpunode runtime install-links`: the links, NVIDIA's hook respected, and the sh first
stage deciding as the Python runtime does."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import gpunode.runtime as runtime_pkg
from gpunode.launch import firststage, process, shim
from gpunode.runtime import config


def test_install_links_respects_nvidia_toolkit(tmp_path, monkeypatch):
    bindir = tmp_path / "venv-bin"
    bindir.mkdir()
    prefix = tmp_path / "bin"
    monkeypatch.setattr(firststage.shutil, "which", lambda *a, **k: None)
    res = firststage.install_links(prefix, bindir)
    assert res["changed"] and (prefix / "nvidia-container-runtime-hook").is_symlink()
    assert firststage.install_links(prefix, bindir)["changed"] is False
    other = tmp_path / "nvidia"
    other.write_text("")
    prefix2 = tmp_path / "bin2"
    monkeypatch.setattr(firststage.shutil, "which", lambda *a, **k: str(other))
    res = firststage.install_links(prefix2, bindir)
    assert not (prefix2 / "nvidia-container-runtime-hook").exists()
    assert res["nvidia_toolkit_hook"] == str(other)


def test_nvidia_cdi_hook_launcher_install_and_remove(tmp_path, monkeypatch):
    """install-links writes the nvidia-cdi-hook launcher in gpunode's own directory
    (<prefix>/../libexec/gpunode), nowhere else: no nvidia-ctk, nothing named nvidia-cdi-hook
    on the prefix; the launcher runs NVIDIA's hook command line. --remove takes back what
    install-links made and leaves what it did not make."""
    bindir = tmp_path / "venv-bin"
    bindir.mkdir()
    prefix = tmp_path / "usr/local/bin"
    monkeypatch.setattr(firststage.shutil, "which", lambda *a, **k: None)
    res = firststage.install_links(prefix, bindir)
    hook = tmp_path / "usr/local/libexec/gpunode/nvidia-cdi-hook"
    assert res["nvidia_cdi_hook"] == str(hook) == str(firststage.nvidia_cdi_hook_path(prefix))
    assert firststage.nvidia_cdi_hook_path() == firststage.Path(
        "/usr/local/libexec/gpunode/nvidia-cdi-hook"
    )
    assert f"wrote launcher {hook}" in res["changes"]
    written = {c.split(" ")[-1] if "->" not in c else c.split(" ")[1] for c in res["changes"]}
    assert all(w.startswith((str(prefix) + "/", str(hook.parent) + "/")) for w in written)
    assert not any(os.path.basename(w) == "nvidia-ctk" for w in written)
    assert not (prefix / "nvidia-cdi-hook").exists()
    assert os.stat(hook).st_mode & 0o777 == 0o755
    # a first stage (the resident service, else the Python launcher beside it)
    python_hook = hook.with_name("nvidia-cdi-hook.py")
    assert f'exec {python_hook} "$@"' in hook.read_text()
    assert f"from {firststage.NVIDIA_CDI_HOOK_MODULE} import main" in python_hook.read_text()
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    proc = subprocess.run(
        [
            str(hook),
            "create-symlinks",
            "--root",
            str(rootfs),
            "--link",
            "libcuda.so.1::/l/libcuda.so",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GPUNODE_RESIDENT_DIR": ""},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(rootfs / "l/libcuda.so") == "libcuda.so.1"
    # a hook it does not serve: NVIDIA's warning and exit 0, through the launcher too
    proc = subprocess.run([str(hook), "a-hook-from-the-future"], capture_output=True,
                          text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "GPUNODE_RESIDENT_DIR": ""})  # fmt: skip
    assert proc.returncode == 0 and proc.stderr.startswith(
        "nvidia-cdi-hook: warning: unsupported hook 'a-hook-from-the-future', ignored"
    ), proc.stderr
    assert firststage.install_links(prefix, bindir)["changed"] is False

    # a file of the site's under one of the names: kept by --remove
    (prefix / "gpunode-hook").unlink()
    (prefix / "gpunode-hook").write_text("#!/bin/sh\n# the site's own\n")
    res = firststage.remove_links(prefix, bindir)
    assert f"removed {hook}" in res["changes"] and not hook.parent.exists()
    assert res["kept"] == [str(prefix / "gpunode-hook")]
    assert sorted(p.name for p in prefix.iterdir()) == ["gpunode-hook"]
    assert firststage.remove_links(prefix, bindir)["changed"] is False


def _dispatch(tmp_path, argv, spec_text=None, config=False):

    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    for name in ("runc", "python-runtime"):
        f = fake / name
        f.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        f.chmod(0o755)
    script = tmp_path / "gpunode-container-runtime"
    script.write_text(firststage.dispatcher(str(fake / "python-runtime")))
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    if spec_text is not None:
        (bundle / "config.json").write_text(spec_text)
    conf = tmp_path / "runtime.toml"
    if config:
        conf.write_text("")
    argv = [a.replace("BUNDLE", str(bundle)) for a in argv]
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "GPUNODE_RUNTIME_CONFIG": str(conf),
        "GPUNODE_RESIDENT_DIR": "",
        "GPUNODE_RUNTIME_CONFIG_CACHE": os.environ["GPUNODE_RUNTIME_CONFIG_CACHE"],
        "GPUNODE_RUNTIME_FIRST_STAGE": os.environ["GPUNODE_RUNTIME_FIRST_STAGE"],
    }
    out = subprocess.run(
        ["sh", str(script), *argv], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return out[0]


PLAIN = json.dumps({"process": {"env": ["PATH=/bin"], "args": ["true"]}})

GPU_SPEC = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}})


@pytest.mark.parametrize(
    ("argv", "spec", "config", "expect"),
    [
        (["start", "id"], None, False, "runc"),
        (
            [
                "--root",
                "/r",
                "--log",
                "/l",
                "--log-format",
                "json",
                "create",
                "--bundle",
                "BUNDLE",
                "id",
            ],
            PLAIN,
            False,
            "runc",
        ),
        (["create", "--bundle", "BUNDLE", "id"], GPU_SPEC, False, "python-runtime"),
        (["create", "-b=BUNDLE", "id"], GPU_SPEC, False, "python-runtime"),
        (["--log=create", "start", "create"], None, False, "runc"),  # "create" as a value/id
        (["--root", "create", "delete", "x"], None, False, "runc"),
        (["create", "--bundle", "BUNDLE", "id"], None, False, "python-runtime"),  # unreadable
        (
            ["create", "--bundle", "BUNDLE", "id"],
            json.dumps({"annotations": {"x": "y"}}),
            True,
            "python-runtime",
        ),
        (["start", "id"], None, True, "python-runtime"),  # runtime.toml may name runtimes
        # NVIDIA's jit-CDI names and unknown NVIDIA kinds reach Python (which selects GPUs
        # or refuses them), from the env and from cdi.k8s.io annotations
        *(
            (["create", "--bundle", "BUNDLE", "id"], json.dumps(spec), False, "python-runtime")
            for name in ("runtime.nvidia.com/gpu=all", "nvidia.com/foo=1")
            for spec in (
                {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={name}"]}},
                {"process": {"env": []}, "annotations": {"cdi.k8s.io/gpu": name}},
            )
        ),
    ],
)
def test_sh_dispatcher_matches_the_python_runtime(tmp_path, argv, spec, config, expect):
    assert _dispatch(tmp_path, argv, spec, config) == expect
    if expect == "runc" and not config:
        # the Python runtime would have made the same decision
        parsed = shim.parse_args(["rt", *argv])
        assert not parsed[0] or runtime_pkg.surely_not_gpu(spec.encode(), config)


# --- with a runtime.toml: the first stage's file (gpunode.runtime.config.first_stage) ---


class Node:
    """A temp dir with fake runtimes that print their path and argv, a runtime.toml, the
    first stage's file and the generated script, run with /bin/sh (dash on Debian)."""

    def __init__(self, tmp_path, monkeypatch):
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for name in ("runc", "crun", "python-runtime"):
            self.fake(self.bin / name)
        self.etc = tmp_path / "etc"
        self.etc.mkdir()
        self.conf = self.etc / "runtime.toml"
        self.side = tmp_path / "run" / "first-stage"
        self.script = tmp_path / "gpunode-container-runtime"
        self.script.write_text(firststage.dispatcher(str(self.bin / "python-runtime")))
        self.bundle = tmp_path / "bundle"
        self.bundle.mkdir()
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "GPUNODE_RUNTIME_CONFIG": str(self.conf),
            "GPUNODE_RESIDENT_DIR": "",
            "GPUNODE_RUNTIME_FIRST_STAGE": str(self.side),
            "GPUNODE_RUNTIME_CONFIG_CACHE": os.environ["GPUNODE_RUNTIME_CONFIG_CACHE"],
        }
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)

    @staticmethod
    def fake(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('#!/bin/sh\nprintf \'%s\\n\' "$0" "$@"\n')
        path.chmod(0o755)

    def configure(self, text=""):
        """Write runtime.toml (dated in the past, as is its directory) and let the Python
        side load it, which writes the first stage's file."""
        self.conf.write_text(text)
        past = time.time() - 100
        os.utime(self.conf, (past, past))
        os.utime(self.etc, (past, past))
        return config.load()

    def run(self, *argv, spec=None):
        if spec is not None:
            (self.bundle / "config.json").write_text(json.dumps(spec))
        argv = [a.replace("BUNDLE", str(self.bundle)) for a in argv]
        out = subprocess.run(
            ["/bin/sh", str(self.script), *argv],
            capture_output=True,
            text=True,
            env=self.env,
            check=True,
        ).stdout.splitlines()
        assert out[1:] == argv, "the program must get the caller's argv unchanged"
        return out[0]


@pytest.fixture
def node(tmp_path, monkeypatch):
    return Node(tmp_path, monkeypatch)


CREATE = ("create", "--bundle", "BUNDLE", "ctr")
ANNOTATED = {"process": {"env": ["PATH=/bin"]}, "annotations": {"org.example/x": "1"}}


def test_fresh_file_runtime_calls_skip_python(node):
    node.configure('runtimes = ["crun", "runc"]\n')
    crun = str(node.bin / "crun")
    for argv in (("start", "ctr"), ("state", "ctr"), ("kill", "ctr", "9"), ("delete", "ctr")):
        assert node.run(*argv) == crun
    assert node.run("--root", "/r", "delete", "--force", "ctr") == crun
    # no blanket "annotations" rule once the configured prefixes are known
    assert node.run(*CREATE, spec=ANNOTATED) == crun
    assert node.run(*CREATE, spec=json.loads(GPU_SPEC)) == str(node.bin / "python-runtime")


def test_configured_annotation_prefix_is_a_marker(node):
    node.configure('annotation-prefixes = ["cdi.k8s.io/", "example.com/gpu"]\n')
    py = str(node.bin / "python-runtime")
    with_prefix = {"process": {"env": []}, "annotations": {"example.com/gpu.x": "0"}}
    assert node.run(*CREATE, spec=with_prefix) == py
    assert node.run(*CREATE, spec=ANNOTATED) == str(node.bin / "runc")
    assert node.run("start", "ctr") == str(node.bin / "runc")


def test_prefix_that_may_be_escaped_keeps_the_annotations_rule(node):
    node.configure('annotation-prefixes = ["a<b/"]\n')
    assert node.run(*CREATE, spec=ANNOTATED) == str(node.bin / "python-runtime")
    assert node.run(*CREATE, spec=json.loads(PLAIN)) == str(node.bin / "runc")


def _stale_by_edit(node):
    os.utime(node.conf)  # edited after the file was written


def _stale_by_rename(node):
    # an older file moved over runtime.toml: its own mtime is old, its directory's is not
    old = node.etc / "new.toml"
    old.write_text('runtimes = ["runc"]\n')
    past = time.time() - 1000
    os.utime(old, (past, past))
    os.replace(old, node.conf)


def _missing(node):
    node.side.unlink()


def _symlinked(node):
    real = node.tmp / "elsewhere"
    real.write_bytes(node.side.read_bytes())
    node.side.unlink()
    node.side.symlink_to(real)


def _other_config(node):
    text = node.side.read_text().replace(f"config {node.conf}", "config /etc/other.toml")
    node.side.write_text(text)


def _truncated(node):
    node.side.write_text(node.side.read_text().replace("end\n", ""))


def _not_ours(node):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    os.chown(node.side, 65534, 65534)


def _directory(node):
    node.side.unlink()
    node.side.mkdir()


@pytest.mark.parametrize(
    "damage",
    [
        _stale_by_edit,
        _stale_by_rename,
        _missing,
        _symlinked,
        _other_config,
        _truncated,
        _directory,
        _not_ours,
    ],
)
def test_unusable_file_sends_every_call_to_python(node, damage):
    node.configure('runtimes = ["crun"]\n')
    assert node.run("start", "ctr") == str(node.bin / "crun")
    damage(node)
    py = str(node.bin / "python-runtime")
    assert node.run("start", "ctr") == py
    assert node.run("delete", "ctr") == py
    assert node.run(*CREATE, spec=ANNOTATED) == py  # today's conservative rule
    assert node.run(*CREATE, spec=json.loads(PLAIN)) == py


def test_runtime_toml_without_file_is_todays_behaviour(node, monkeypatch):
    monkeypatch.setenv("GPUNODE_RUNTIME_FIRST_STAGE", "")  # the Python side writes none
    node.env["GPUNODE_RUNTIME_FIRST_STAGE"] = ""
    node.configure('runtimes = ["crun"]\n')
    assert not node.side.exists()
    py = str(node.bin / "python-runtime")
    assert node.run("start", "ctr") == py
    assert node.run(*CREATE, spec=ANNOTATED) == py


def test_no_runnable_runtime_goes_to_python_for_its_error(node):
    node.configure('runtimes = ["/nonexistent/runc"]\n')
    assert node.run("start", "ctr") == str(node.bin / "python-runtime")


@pytest.mark.parametrize(
    "runtimes",
    [
        None,  # the defaults
        ["crun", "runc"],
        ["CRUN_ABS"],
        ["missing-runtime", "runc"],
        ["/nonexistent/runc", "crun"],
        ["DIR_ABS", "crun"],
        ["sub/runc", "runc"],
    ],
)
@pytest.mark.parametrize("path", ["BIN:/usr/bin:/bin", "/nowhere::BIN/", "BIN2:BIN"])
def test_sh_picks_the_runtime_python_would(node, monkeypatch, runtimes, path):
    other = node.tmp / "bin2"
    node.fake(other / "runc")
    node.fake(node.bin / "sub" / "runc")
    (node.tmp / "adir").mkdir()
    mapping = {"CRUN_ABS": str(node.bin / "crun"), "DIR_ABS": str(node.tmp / "adir")}
    env_path = path.replace("BIN2", str(other)).replace("BIN", str(node.bin))
    node.env["PATH"] = env_path
    monkeypatch.setenv("PATH", env_path)
    monkeypatch.chdir(node.tmp)  # an empty PATH entry means the current directory
    text = (
        ""
        if runtimes is None
        else f"runtimes = {json.dumps([mapping.get(r, r) for r in runtimes])}\n"
    )
    cfg = node.configure(text)
    python_pick = next(process.find_runtimes(cfg.runtimes, []), None)
    expect = python_pick or str(node.bin / "python-runtime")
    assert node.run("start", "ctr") == expect


# ------------------------------------------------------------------ the file's mode


def _others_write(node, text):
    """What someone else could do to a file they can write: change its content (in place,
    keeping its inode and mode) and its mtime, which stays newer than runtime.toml."""
    with open(node.side, "r+") as fh:
        fh.seek(0)
        fh.write(text)
        fh.truncate()


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664, 0o600, 0o4644])
def test_a_file_of_another_mode_picks_no_runtime(node, tmp_path, mode):
    """The review's finding: a root-owned first-stage file of mode 0666 let any local user
    pick what every runtime call execs as root. Now a file that says more than the
    defaults is used only at mode 0644 exactly; else every call goes to Python."""
    node.configure('runtimes = ["crun"]\n')
    crun, py = str(node.bin / "crun"), str(node.bin / "python-runtime")
    assert node.run("start", "ctr") == crun
    evil = tmp_path / "evil"
    node.fake(evil)
    os.chmod(node.side, mode)
    text = node.side.read_text()
    assert "runtime crun\n" in text
    _others_write(node, text.replace("runtime crun\n", f"runtime {evil}\n"))
    assert node.run("start", "ctr") == py
    assert node.run("delete", "ctr") == py
    assert node.run(*CREATE, spec=json.loads(PLAIN)) == py
    os.chmod(node.side, 0o644)
    assert node.run("start", "ctr") == str(evil)  # the same file at 0644 is used as it is


def test_extra_markers_need_the_mode_too(node):
    node.configure('annotation-prefixes = ["cdi.k8s.io/", "example.com/gpu"]\n')
    assert "marker example.com/gpu" in node.side.read_text()
    runc, py = str(node.bin / "runc"), str(node.bin / "python-runtime")
    assert node.run("start", "ctr") == runc
    os.chmod(node.side, 0o666)
    assert node.run("start", "ctr") == py


def test_a_file_saying_the_defaults_needs_no_mode_check(node, monkeypatch):
    """A file with only the default runtimes and no extra marker picks exactly what the
    stage picks with no runtime.toml at all, so the default node runs no find(1)."""
    node.configure("")
    assert node.side.read_text().endswith(config.first_stage_body(list(process.DEFAULT_RUNTIMES), []))
    os.chmod(node.side, 0o666)
    node.env["PATH"] = f"{node.bin}:/nonexistent"  # no find reachable anyway: not asked
    assert node.run("start", "ctr") == str(node.bin / "runc")


def test_python_side_rewrites_a_file_of_another_mode(node):
    cfg = node.configure('runtimes = ["crun"]\n')
    before = node.side.stat()
    os.chmod(node.side, 0o666)
    config.first_stage(cfg, os.stat(node.conf))
    after = node.side.stat()
    assert after.st_mode & 0o7777 == 0o644 and after.st_ino != before.st_ino
    os.chmod(node.side, 0o644)
    ino = node.side.stat().st_ino
    config.first_stage(cfg, os.stat(node.conf))
    assert node.side.stat().st_ino == ino  # a trusted, current file is left alone


def test_python_side_rewrites_a_file_of_another_owner(node):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    cfg = node.configure('runtimes = ["crun"]\n')
    os.chown(node.side, 65534, 65534)
    config.first_stage(cfg, os.stat(node.conf))
    assert node.side.stat().st_uid == os.geteuid()


# ------------------------------------------------------------------ the runtime's path


def test_a_runtime_path_with_blanks_is_quoted(tmp_path):
    where = tmp_path / "my prefix; $(touch pwned)"
    where.mkdir()
    runtime = where / "gpunode-container-runtime.py"
    runtime.write_text('#!/bin/sh\necho "python-runtime $0"\n')
    runtime.chmod(0o755)
    script = tmp_path / "stage"
    script.write_text(firststage.dispatcher(str(runtime)))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(GPU_SPEC)
    env = {
        "PATH": "/usr/bin:/bin",
        "GPUNODE_RUNTIME_CONFIG": str(tmp_path / "none.toml"),
        "GPUNODE_RESIDENT_DIR": "",
        "GPUNODE_RUNTIME_FIRST_STAGE": "",
    }
    out = subprocess.run(
        ["sh", str(script), "create", "--bundle", str(bundle), "id"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"python-runtime {runtime}\n"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("bad", ["/opt/a\nb/rt.py", "/opt/a\rb/rt.py"])
def test_a_runtime_path_with_a_line_break_is_refused(bad):
    with pytest.raises(ValueError, match="newline"):
        firststage.dispatcher(bad)


def test_install_links_refuses_what_a_launcher_cannot_hold(tmp_path, monkeypatch, capsys):
    from gpunode.cli import main

    rc = main.main(["runtime", "install-links", "--prefix", str(tmp_path / "a\nb")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "line break" in err, err
    assert not (tmp_path / "a\nb").exists()
    monkeypatch.setattr("sys.executable", "/opt/my venv/bin/python")
    rc = main.main(["runtime", "install-links", "--prefix", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert rc == 2 and "'/opt/my venv/bin/python' has a blank" in err, err
    assert not (tmp_path / "p").exists()


GOLDEN = Path(__file__).with_name("dispatcher")


@pytest.mark.parametrize(
    "name, runtime",
    [
        ("default", "/usr/local/bin/gpunode-container-runtime.py"),
        ("quoted", "/opt/gpu node/it's $HOME `x`.py"),
        ("tables", "/r.py"),
    ],
)
def test_dispatcher_rendering_is_byte_identical(monkeypatch, name, runtime):
    """The first stage as it is meant to be rendered (the files under dispatcher/; last
    regenerated for the resident conversation of gpunode.launch.protocol): the same bytes
    for the same inputs, the quoted runtime path and the tables it is generated from
    included. Regenerate them only for a change of the stage meant to be one."""
    import gpunode.runtime as runtime_pkg

    if name == "tables":
        monkeypatch.setattr(
            runtime_pkg, "REQUEST_MARKERS", (*runtime_pkg.REQUEST_MARKERS, b"EXTRA_MARKER")
        )
        monkeypatch.setattr(shim, "VALUE_OPTS", {*shim.VALUE_OPTS, "zz-opt"})
        monkeypatch.setattr(process, "DEFAULT_RUNTIMES", ("crun", "youki"))
    assert firststage.dispatcher(runtime) == (GOLDEN / f"{name}.golden").read_text()


def test_render_drops_template_lines_and_refuses_a_placeholder_left_over():
    text = "#!/bin/sh\n# shellcheck disable=SC1007\n## about the template\n  ## indented\necho @A@ @B@\n"
    assert firststage.render(text, A="a@B@", B="b") == "#!/bin/sh\necho a@B@ b\n"
    with pytest.raises(ValueError, match="no value for the template's @B@"):
        firststage.render(text, A="a")
    with pytest.raises(ValueError, match="placeholders not in the template: C"):
        firststage.render(text, A="a", B="b", C="c")
