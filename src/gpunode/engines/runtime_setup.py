"""`gpunode runtime setup`: everything gpunode's runtime needs on a node, in one run (one
module execution for the gpu_container_runtime role):

1. runtime.toml from the given content, checked by gpunode's config loader before it
   replaces the file (unchanged content: no write);
2. the CDI spec in the first of cdi-spec-dirs (and the driver nodes' /dev/char links,
   gpunode.nvidia.devchar), from a fresh discovery that also rewrites
   the inventory cache (gpunode.runtime.plan, gpunode.runtime.cdi);
3. systemd units from the given content; ``daemon-reload`` only when one changed (or
   systemd still has an older one loaded), ``enable`` and ``start`` only for a unit that is
   not enabled or active yet;
4. containerd: the drop-in and ``imports`` (gpunode.engines.containerd): the handler names,
   CDI (refused on containerd < 1.7.0 before anything is written), the CDI spec's directory
   added to ``cdi_spec_dirs``, ``container_annotations`` from runtime.toml's
   annotation-prefixes; and, for Kubernetes, a RuntimeClass manifest naming the handlers
   (written for the operator to apply: gpunode never talks to the API server);
5. Docker: the runtime merged into daemon.json (gpunode.engines.docker: other keys
   kept, backup, lock, ``dockerd --validate``).

Every file is replaced atomically; the result says which changed and which engines need a
restart (the caller restarts them: gpunode never restarts an engine). ``dry_run`` computes
the same and writes nothing (not the inventory cache either); each file's content before
and after is returned, so a caller can show the diff.

The content comes as one JSON object (``--input``, ``-`` for stdin)::

    {"config": "<runtime.toml>", "units": {"gpunode-refresh.service": "<unit>", ...}}

Both keys are optional: without ``config`` runtime.toml is left as it is (and read as it
is for the CDI spec). Bad input (the document, a unit name, the runtime.toml content, an
engine's config file) is one line and nothing of it written; a step that fails (systemctl,
a tool an engine needs) is one line too, after the steps before it were done.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field

from ..nvidia import devchar
from ..nvidia.devices import under
from ..runtime import config as runtime_config
from ..util import files, tool
from ..util.command import UsageError
from . import device_plugin
from .common import EngineRunError, makedirs, read, run_tool

UNIT_DIR = "/etc/systemd/system"
# The systemctl executable; tests point this at a fake.
SYSTEMCTL = "systemctl"
SYSTEMCTL_TIMEOUT = 120
FILE_MODE = 0o644
_UNIT_NAME = re.compile(
    r"[A-Za-z0-9:_.@\\-]+\.(service|socket|device|mount|automount|swap|target|path|timer|slice)\Z"
)
_INPUT_KEYS = ("config", "units")


@dataclass
class Docker:
    """What `runtime configure docker` is given."""

    config: str
    runtime_name: str
    runtime_path: str
    set_default: bool = False
    cdi: bool = False


@dataclass
class Containerd:
    """What `runtime configure containerd` is given (the runtime's path is its default, as
    the role has always registered it). ``names``: handler names, the first the default with
    ``set_default``; ``cdi``: enable_cdi plus the CDI spec's directory in cdi_spec_dirs;
    ``pass_annotations``: container_annotations covering runtime.toml's annotation-prefixes;
    ``runtime_class``: where the RuntimeClass manifest goes (None: none written), NVIDIA's
    device plugin's Helm values beside it (gpunode.engines.device_plugin), naming
    ``nvidia_cdi_hook`` as the plugin's CDI hook."""

    config: str
    drop_in_dir: str
    set_default: bool = False
    names: tuple[str, ...] = ("gpunode",)
    cdi: bool = False
    pass_annotations: bool = False
    runtime_class: str | None = None
    nvidia_cdi_hook: str | None = None  # None: where install-links puts it by default


# A Kubernetes RuntimeClass's name and handler must be a DNS-1123 label.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


def runtime_class_manifest(names: tuple[str, ...]) -> str:
    """One RuntimeClass per handler name (named as its handler), for `kubectl apply -f`."""
    for name in names:
        if not _DNS_LABEL.match(name):
            raise UsageError(
                f"--containerd-name {name!r}: not usable as a Kubernetes RuntimeClass handler "
                "(lowercase letters, digits and '-', starting and ending alphanumeric, at most "
                "63 characters)"
            )
    docs = [
        "# Written by `gpunode runtime setup`: one RuntimeClass per containerd handler that\n"
        "# runs gpunode's runtime. Apply once per cluster: kubectl apply -f <this file>\n"
    ]
    for name in names:
        docs.append(
            "---\n"
            "apiVersion: node.k8s.io/v1\n"
            "kind: RuntimeClass\n"
            "metadata:\n"
            f"  name: {name}\n"
            f"handler: {name}\n"
        )
    return "".join(docs)


@dataclass
class Setup:
    """One setup run. ``config_path`` None: gpunode's runtime.toml ($GPUNODE_RUNTIME_CONFIG or
    /etc/gpunode/runtime.toml), as every other command reads it."""

    config_path: str | None = None
    config_text: str | None = None
    # A node whose pods reach gpunode through containerd's CRI: runtime.toml gets
    # runtime_config.KUBERNETES_SETTINGS where its content does not set them, and an
    # accept-envvar-unprivileged = true needs ``insecure_envvar`` (kubernetes_config).
    kubernetes: bool = False
    insecure_envvar: bool = False
    docker: Docker | None = None
    containerd: Containerd | None = None
    cdi_spec: bool = False
    unit_dir: str = UNIT_DIR
    units: dict[str, str] = field(default_factory=dict)
    enable: list[str] = field(default_factory=list)
    start: list[str] = field(default_factory=list)
    # units turned off (a setting that was on: gpu_container_runtime_resident), each only
    # when it is running or enabled
    stop: list[str] = field(default_factory=list)
    disable: list[str] = field(default_factory=list)


@dataclass
class FileChange:
    kind: str  # runtime.toml, daemon.json, containerd config, containerd drop-in, cdi spec, unit
    path: str
    changed: bool
    before: str | None = None
    after: str | None = None
    backup: str | None = None

    def to_dict(self, dry_run: bool) -> dict:
        out = {"kind": self.kind, "path": self.path, "changed": self.changed}
        if self.backup is not None:
            out["backup"] = self.backup
        if dry_run:
            out["before"], out["after"] = self.before, self.after
        return out


@dataclass
class Result:
    dry_run: bool
    files: list[FileChange] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)
    daemon_reload: bool = False
    enabled: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    dev_char_links: list[str] = field(default_factory=list)  # made (a dry run: would make)
    # why runtime.toml got the Kubernetes settings: "asked" (--kubernetes), or the sign of
    # cri-dockerd found on the node (a kubelet on Docker); None: not a Kubernetes node
    kubernetes: str | None = None

    @property
    def changed(self) -> bool:
        return bool(
            any(f.changed for f in self.files)
            or self.daemon_reload
            or self.enabled
            or self.started
            or self.stopped
            or self.disabled
            or self.dev_char_links
        )

    def to_dict(self) -> dict:
        return {
            "changed": self.changed,
            "dry_run": self.dry_run,
            "files": [f.to_dict(self.dry_run) for f in self.files],
            "changed_files": [f.path for f in self.files if f.changed],
            "restart": self.restart,
            "dev_char_links": self.dev_char_links,
            "kubernetes": self.kubernetes,
            "systemd": {
                "daemon_reload": self.daemon_reload,
                "enabled": self.enabled,
                "started": self.started,
                "stopped": self.stopped,
                "disabled": self.disabled,
            },
        }


# --------------------------------------------------------------------------- input


def read_input(source: str | None, stdin=None) -> tuple[str | None, dict[str, str]]:
    """(runtime.toml content or None, units) from the JSON document at ``source`` ("-":
    ``stdin``); (None, {}) without a source."""
    if source is None:
        return None, {}
    where = "--input -" if source == "-" else f"--input {source}"
    try:
        if source == "-":
            text = (stdin or sys.stdin).read()
        else:
            with open(source, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        raise UsageError(f"{where}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{where}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
            'expected {"config": "<runtime.toml>", "units": {"NAME": "<unit>"}}'
        ) from None
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a JSON object with the keys {', '.join(_INPUT_KEYS)}")
    for key in doc:
        if key not in _INPUT_KEYS:
            raise UsageError(
                f"{where}: unknown key {key!r}; accepted keys: {', '.join(_INPUT_KEYS)}"
            )
    text = doc.get("config")
    if text is not None and not isinstance(text, str):
        raise UsageError(f"{where}: config must be runtime.toml's content as a string")
    units = doc.get("units") or {}
    if not isinstance(units, dict) or not all(isinstance(v, str) for v in units.values()):
        raise UsageError(f"{where}: units must map unit names to their content (strings)")
    for name in units:
        check_unit_name(name, f"{where}: units")
    return text, units


def check_unit_name(name: str, where: str) -> None:
    if not _UNIT_NAME.match(name):
        raise UsageError(
            f"{where}: {name!r} is not a systemd unit name (letters, digits, :_.@- and a unit "
            "suffix such as .service or .path)"
        )


def _new_config(path: str, text: str) -> runtime_config.RuntimeConfig:
    """The candidate runtime.toml, checked by gpunode's loader (bad content: one line)."""
    try:
        return runtime_config.from_text(text.encode("utf-8"), f"{path} (new content)")
    except runtime_config.ConfigError as exc:
        raise UsageError(f"{exc}; {path} left unchanged") from None


def kubernetes_config(path: str, text: str, insecure_envvar: bool, found: str | None = None) -> str:
    """runtime.toml content for a Kubernetes node: ``text`` (already checked by
    _new_config, so its keys are all top-level ones) with each of
    runtime_config.KUBERNETES_SETTINGS it does not set appended, under a comment saying
    why (``found``: the sign of cri-dockerd that made it one, else --kubernetes). With
    ``insecure_envvar`` the open mode is written instead (explicitly, so the file says so);
    without it, content that sets the open mode is refused in one line."""
    import tomllib

    data = tomllib.loads(text)
    key = runtime_config.INSECURE_KEY
    if data.get(key) is True and not insecure_envvar:
        raise UsageError(
            f"{path}: {key} = true on a Kubernetes node lets any pod take every GPU by "
            "NVIDIA_VISIBLE_DEVICES (a CUDA image's ENV does); remove it (gpunode then writes "
            f"{key} = false, accept-volume-mounts = true) or opt in with "
            "--kubernetes-insecure-envvar (role: gpu_container_runtime_kubernetes_insecure_envvar)"
        )
    lines = []
    for name, value in runtime_config.KUBERNETES_SETTINGS:
        if name in data:
            continue
        if name == key and insecure_envvar:
            value = True
        lines.append(f"{name} = {'true' if value else 'false'}")
    if not lines:
        return text
    why = (
        "# Kubernetes node, the insecure opt-in (--kubernetes-insecure-envvar): any pod may\n"
        "# ask for any GPU by NVIDIA_VISIBLE_DEVICES\n"
        if insecure_envvar
        else f"# Kubernetes node ({found or 'gpunode runtime setup --kubernetes'}): an unprivileged\n"
        "# pod gets GPUs only through its device plugin allocation (volume mounts, CDI)\n"
    )
    sep = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{sep}{why}" + "".join(f"{line}\n" for line in lines)


# cri-dockerd (kubelet on Docker through Mirantis' CRI shim): its socket or systemd units.
# Pods then reach gpunode through Docker, whose runtime reads the same runtime.toml, so the
# node is a Kubernetes node for runtime.toml whatever the role was told (cri_dockerd).
CRI_DOCKERD_PATHS = tuple(
    ["/run/cri-dockerd.sock", "/var/run/cri-dockerd.sock"]
    + [
        f"{d}/cri-docker.{kind}"
        for d in ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
        for kind in ("service", "socket")
    ]
)


def cri_dockerd() -> str | None:
    """The first sign of cri-dockerd on this node (CRI_DOCKERD_PATHS), or None."""
    return next((p for p in CRI_DOCKERD_PATHS if os.path.lexists(p)), None)


def check_kubernetes_file(path: str | None, insecure_envvar: bool) -> None:
    """A Kubernetes node's runtime.toml left as it is (no content given): refused in one
    line while it accepts NVIDIA_VISIBLE_DEVICES from unprivileged containers, unless
    opted in."""
    cfg = runtime_config.load(path, write_caches=False)
    if cfg.accept_envvar_unprivileged and not insecure_envvar:
        where = runtime_config.config_path(path)
        raise UsageError(
            f"{where}: accept-envvar-unprivileged is true (gpunode's default where the key is "
            "absent): on a Kubernetes node any pod could take every GPU by "
            "NVIDIA_VISIBLE_DEVICES; give runtime.toml's content (--input; gpunode adds "
            "accept-envvar-unprivileged = false, accept-volume-mounts = true) or opt in with "
            "--kubernetes-insecure-envvar"
        )


# --------------------------------------------------------------------------- files


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def _owned_file(kind: str, path: str, content: str, dry_run: bool) -> FileChange:
    """A file gpunode writes whole (runtime.toml, a unit): replaced when its content or mode
    differs (a symlink in its place is replaced, as Ansible's template module does)."""
    data = content.encode("utf-8")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise EngineRunError(f"{path}: cannot read ({exc.strerror})") from exc
    old = None
    if st is not None and not os.path.islink(path):
        old, _ = read(path)
    same = old == data
    mode_ok = st is not None and (st.st_mode & 0o7777) == FILE_MODE
    change = FileChange(kind, path, not (same and mode_ok), _text(old), content)
    if dry_run or not change.changed:
        return change
    if same:  # only the mode differs
        os.chmod(path, FILE_MODE)
        return change
    makedirs(os.path.dirname(path) or ".")
    files.write_atomic(path, data, FILE_MODE, skip_if_same=False, sync_dir=True)
    return change


def _engine_file(kind: str, path: str, after: str, before: bytes | None) -> FileChange:
    return FileChange(kind, path, _text(before) != after, _text(before), after)


def _docker(d: Docker, dry_run: bool, result: Result) -> None:
    from . import docker

    before, _ = read(d.config)
    res = docker.configure_docker(
        d.config,
        dry_run=dry_run,
        runtime_name=d.runtime_name,
        runtime_path=d.runtime_path,
        set_default=d.set_default,
        cdi=d.cdi,
    )
    result.files.append(
        FileChange("daemon.json", d.config, res.changed, _text(before), res.content,
                   res.backup)
    )  # fmt: skip
    if res.changed:
        result.restart.append("docker")


def _containerd(
    c: Containerd,
    cfg: runtime_config.RuntimeConfig | None,
    dry_run: bool,
    result: Result,
) -> None:
    from ..runtime import cdi
    from . import containerd

    drop_in = os.path.join(c.drop_in_dir, containerd.DROP_IN_NAME)
    before, _ = read(c.config)
    drop_before, _ = read(drop_in)
    spec_dirs: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    if cfg is not None and c.cdi:
        spec_dirs = (os.path.dirname(cdi.install_path(cfg.cdi_spec_dirs)),)
    if cfg is not None and c.pass_annotations:
        annotations = containerd.annotation_patterns(cfg.annotation_prefixes)
    res = containerd.configure_containerd(
        c.config,
        dry_run=dry_run,
        drop_in_dir=c.drop_in_dir,
        set_default=c.set_default,
        names=c.names,
        cdi=c.cdi,
        cdi_spec_dirs=spec_dirs,
        container_annotations=annotations,
    )
    main = _engine_file("containerd config", c.config, res.content, before)
    main.backup = res.backup
    result.files.append(main)
    result.files.append(
        _engine_file("containerd drop-in", drop_in, res.drop_in_content or "", drop_before)
    )
    if res.changed:
        result.restart.append("containerd")
    if c.runtime_class is not None:
        result.files.append(
            _owned_file("runtimeclass", c.runtime_class, runtime_class_manifest(c.names), dry_run)
        )
        result.files.append(
            _owned_file(
                "device plugin values",
                device_plugin.values_path(c.runtime_class),
                _device_plugin_values(c, cfg),
                dry_run,
            )
        )


def _device_plugin_values(c: Containerd, cfg: runtime_config.RuntimeConfig | None) -> str:
    from ..launch.firststage import nvidia_cdi_hook_path

    assert cfg is not None  # loaded by setup() whenever a RuntimeClass file is written
    return device_plugin.values(
        names=c.names,
        set_default=c.set_default,
        cdi=c.cdi,
        pass_annotations=c.pass_annotations,
        accept_volume_mounts=cfg.accept_volume_mounts,
        accept_envvar_unprivileged=cfg.accept_envvar_unprivileged,
        driver_root=cfg.driver_root,
        hook_path=c.nvidia_cdi_hook or str(nvidia_cdi_hook_path()),
    )


def _runtime_config(
    s: Setup, new: runtime_config.RuntimeConfig | None, dry_run: bool
) -> runtime_config.RuntimeConfig:
    """runtime.toml as it is after this run (a dry run: the content it would write)."""
    if new is not None:
        return new
    return runtime_config.load(s.config_path, write_caches=not dry_run)


def _cdi_spec(
    s: Setup, new: runtime_config.RuntimeConfig | None, dry_run: bool, result: Result
) -> None:
    from ..runtime import cdi, plan

    # a dry run: the content the run would write, else the file as it is (and no cache
    # written); a run: the file just written, as the runtime reads it
    cfg = (
        new
        if dry_run and new is not None
        else runtime_config.load(s.config_path, write_caches=not dry_run)
    )
    spec = plan.cdi_spec(cfg, store=not dry_run)
    path = cdi.install_path(cfg.cdi_spec_dirs)
    after = cdi.render(spec, path)
    before, _ = read(path)
    changed = cdi.write(spec, path) if not dry_run else _text(before) != after
    result.files.append(FileChange("cdi spec", path, changed, _text(before), after))


# --------------------------------------------------------------------------- systemd


def _systemctl(*args: str) -> tool.Ran:
    return run_tool(
        None, f"`systemctl {' '.join(args)}`", [SYSTEMCTL, *args], timeout=SYSTEMCTL_TIMEOUT
    )


def _systemctl_must(*args: str) -> None:
    proc = _systemctl(*args)
    if proc.returncode != 0:
        first = (
            tool.first_line(proc.stderr + "\n" + proc.stdout) or f"exit status {proc.returncode}"
        )
        raise EngineRunError(f"`systemctl {' '.join(args)}` failed: {first}")


def is_enabled(unit: str) -> bool:
    """As Ansible's systemd_service module judges it: `is-enabled` succeeds and the unit is
    not only an alias or indirectly enabled."""
    proc = _systemctl("is-enabled", unit)
    return proc.returncode == 0 and proc.stdout.strip() not in ("indirect", "alias")


def is_active(unit: str) -> bool:
    """Running or on its way there (systemd_service's `started`)."""
    return _systemctl("is-active", unit).stdout.strip() in ("active", "activating", "reloading")


def needs_reload(unit: str) -> bool:
    """systemd has an older version of the unit's file loaded (e.g. a run whose
    daemon-reload failed wrote it)."""
    proc = _systemctl("show", "--property=NeedDaemonReload", "--value", unit)
    return proc.stdout.strip() == "yes"


def _systemd(s: Setup, dry_run: bool, result: Result) -> None:
    units = [f for f in result.files if f.kind == "unit"]
    result.daemon_reload = any(f.changed for f in units) or any(
        needs_reload(os.path.basename(f.path)) for f in units
    )
    if result.daemon_reload and not dry_run:
        _systemctl_must("daemon-reload")
    for unit in s.enable:
        if not is_enabled(unit):
            if not dry_run:
                _systemctl_must("enable", unit)
            result.enabled.append(unit)
    for unit in s.start:
        if not is_active(unit):
            if not dry_run:
                _systemctl_must("start", unit)
            result.started.append(unit)
    for unit in s.stop:
        if is_active(unit):
            if not dry_run:
                _systemctl_must("stop", unit)
            result.stopped.append(unit)
    for unit in s.disable:
        if is_enabled(unit):
            if not dry_run:
                _systemctl_must("disable", unit)
            result.disabled.append(unit)


# --------------------------------------------------------------------------- the run


def setup(s: Setup, *, dry_run: bool = False) -> Result:
    """Do (or with ``dry_run`` compute) the whole setup; see the module docstring."""
    target = runtime_config.config_path(s.config_path)
    for where, names in (
        ("--enable", s.enable),
        ("--start", s.start),
        ("--stop", s.stop),
        ("--disable", s.disable),
    ):
        for name in names:
            check_unit_name(name, where)
    for name in s.units:
        check_unit_name(name, "units")
    kubernetes = "asked" if s.kubernetes else None
    if s.docker is not None and not s.kubernetes and (sign := cri_dockerd()) is not None:
        # a kubelet on Docker: any pod's env would take every GPU in the open mode, so the
        # node gets the Kubernetes settings (secure) as a containerd one does; the open
        # mode stays an explicit opt-in (--kubernetes --kubernetes-insecure-envvar)
        s.kubernetes = True
        kubernetes = f"cri-dockerd ({sign})"
    if s.config_text is not None:
        _new_config(target, s.config_text)  # the given content, checked as it is
        if s.kubernetes:
            s.config_text = kubernetes_config(
                target, s.config_text, s.insecure_envvar,
                kubernetes if kubernetes != "asked" else None,
            )  # fmt: skip
    elif s.kubernetes:
        check_kubernetes_file(s.config_path, s.insecure_envvar)
    new = _new_config(target, s.config_text) if s.config_text is not None else None
    if s.containerd is not None:
        from . import containerd

        containerd.handlers(s.containerd.config, s.containerd.names)
        if s.containerd.runtime_class is not None:
            runtime_class_manifest(s.containerd.names)
            _device_plugin_values(s.containerd, _runtime_config(s, new, dry_run))
        if s.containerd.cdi:  # before anything is written: CDI where containerd has none
            containerd.check_cdi(s.containerd.config)
    result = Result(dry_run, kubernetes=kubernetes)
    if s.config_text is not None:
        result.files.append(_owned_file("runtime.toml", target, s.config_text, dry_run))
    if s.cdi_spec:
        _cdi_spec(s, new, dry_run, result)
    # the driver's nodes as they are now: their /dev/char links (gpunode.nvidia.devchar)
    dev_root = _runtime_config(s, new, dry_run).dev_root
    result.dev_char_links = devchar.create(under(dev_root, "/dev"), dry_run=dry_run)
    for name, text in s.units.items():
        result.files.append(_owned_file("unit", os.path.join(s.unit_dir, name), text, dry_run))
    if s.units or s.enable or s.start or s.stop or s.disable:
        _systemd(s, dry_run, result)
    # The engines last: a step that fails after an engine's file changed would leave the
    # engine unrestarted (the caller restarts after a successful run), and the next run
    # would find nothing to change.
    if s.containerd is not None:
        c = s.containerd
        needed = c.cdi or c.pass_annotations or c.runtime_class is not None
        cfg = _runtime_config(s, new, dry_run) if needed else None
        _containerd(c, cfg, dry_run, result)
    if s.docker is not None:
        _docker(s.docker, dry_run, result)
    return result


def summary(result: Result) -> str:
    """Lines of text for a person (without --json)."""
    verb = "would change" if result.dry_run else "changed"
    lines = [f"{f.path}: {verb if f.changed else 'unchanged'}" for f in result.files]
    if result.daemon_reload:
        lines.append(f"systemd: daemon-reload{' (would run)' if result.dry_run else ''}")
    for what, units in (
        ("enable", result.enabled),
        ("start", result.started),
        ("stop", result.stopped),
        ("disable", result.disabled),
    ):
        for unit in units:
            lines.append(f"systemd: {what} {unit}{' (would run)' if result.dry_run else ''}")
    if result.restart:
        lines.append(f"restart needed: {', '.join(result.restart)}")
    if result.kubernetes and result.kubernetes != "asked":
        lines.append(f"kubernetes settings: the kubelet uses Docker through {result.kubernetes}")
    return "\n".join(lines) if lines else "nothing to do"
