"""gpunode-hook's command line, parsed by hand: the subcommands' options and ``Args``.

Not argparse: argparse (with re and enum) is most of this program's start-up, which every
GPU container pays. Apart from gpunode.hook.main (the subcommands' functions) so that the
runtime shim parses the hook arguments its edits build without importing the hook's work
before it starts runc's create (gpunode.launch.shim).
"""

from __future__ import annotations

from .errors import HookError

# Each subcommand's options ("list": repeatable, "value" or "flag").
OPTIONS = {
    "configure": {
        "--link": "list",
        "--library": "list",
        "--folder": "list",
        "--gpu": "list",
        "--proc-driver": "flag",
        "--gpus-selected": "flag",
        "--mig-cap": "list",
        "--mig-caps-all": "flag",
        "--driver-root": "value",
    },
    "update-ldcache": {"--library": "list", "--folder": "list"},
    "create-symlinks": {"--link": "list"},
    "mount-proc-driver": {
        "--gpu": "list",
        "--mig-cap": "list",
        "--mig-caps-all": "flag",
        "--driver-root": "value",
    },
}

# NVIDIA's hook command line (``nvidia-cdi-hook <sub>``, ``nvidia-ctk hook <sub>``): the
# subcommands NVIDIA's CDI specs call, with NVIDIA's option names (gpunode.hook.nvcli).
NVIDIA_OPTIONS = {
    "create-symlinks": {"--link": "list"},
    "enable-cuda-compat": {"--host-driver-version": "value"},
    # --ldconfig-path: accepted and ignored; no ldconfig is run (gpunode.hook.nvcli)
    "update-ldcache": {"--folder": "list", "--ldconfig-path": "value"},
    # --driver-root: gpunode's (where the driver's /proc/driver/nvidia is; default /)
    "disable-device-node-modification": {"--driver-root": "value"},
    "update-application-profile": {},
    "chmod": {"--path": "list", "--mode": "value"},
    # NVIDIA's v1.18.0-rc.1 only; --ldconfig-path accepted and ignored as update-ldcache's
    "create-soname-symlinks": {"--folder": "list", "--ldconfig-path": "value"},
}


class Args:
    def __init__(self) -> None:
        self.command: str | None = None
        self.version = False
        self.help = False
        self.root: str | None = None
        self.link: list[str] = []
        self.library: list[str] = []
        self.folder: list[str] = []
        self.gpu: list[str] = []
        self.proc_driver = False
        self.gpus_selected = False
        self.mig_cap: list[str] = []
        self.mig_caps_all = False
        self.driver_root = "/"
        self.host_driver_version = ""
        self.ldconfig_path = ""
        self.path: list[str] = []
        self.mode: str | None = None


def parse_args(argv: list[str], options: dict = OPTIONS) -> Args:
    """*argv* (without the program name) against the subcommand table *options*."""
    args = Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        table = {"--root": "value"} | (options[args.command] if args.command else {})
        if arg in ("-h", "--help"):
            args.help = True
        elif arg == "--version" and args.command is None:
            args.version = True
        elif name in table:
            kind = table[name]
            if kind == "flag":
                if eq:
                    raise HookError(f"{name} takes no value")
                setattr(args, name[2:].replace("-", "_"), True)
            else:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise HookError(f"{name} needs a value")
                    value = argv[i]
                attr = name[2:].replace("-", "_")
                if kind == "list":
                    getattr(args, attr).append(value)
                else:
                    setattr(args, attr, value)
        elif args.command is None and not arg.startswith("-"):
            if arg not in options:
                raise HookError(f"unknown subcommand {arg!r}; accepted: {', '.join(options)}")
            args.command = arg
        else:
            where = f" for {args.command}" if args.command else ""
            raise HookError(f"unrecognized argument {arg!r}{where}")
        i += 1
    return args
