"""What the engines' tests share: paths, readers, a containerd config maker, fake tools."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from gpunode.engines import containerd

RT = "/usr/local/bin/gpunode-container-runtime"

V2 = 'plugins."io.containerd.grpc.v1.cri"'


def read_json(p: Path) -> dict:
    return json.loads(p.read_text())


def ctd(tmp_path: Path, body: str | None = None) -> tuple[Path, Path]:
    main = tmp_path / "containerd" / "config.toml"
    main.parent.mkdir(exist_ok=True)
    if body is not None:
        main.write_text(body)
    return main, tmp_path / "containerd" / "conf.d"


def load(p: Path) -> dict:
    return tomllib.loads(p.read_text())


def runtime(drop: dict, name: str = "gpunode", plugin: str = "io.containerd.grpc.v1.cri") -> dict:
    return drop["plugins"][plugin]["containerd"]["runtimes"][name]


def dangling(tmp_path: Path, name: str) -> tuple[Path, Path]:
    link = tmp_path / "etc" / name
    link.parent.mkdir(exist_ok=True)
    target = tmp_path / "elsewhere" / "deep" / name
    link.symlink_to(target)
    return link, target


DUMP = f"""version = 2
root = "/var/lib/containerd"

[plugins]
  [{V2}]
    enable_cdi = false
    sandbox_image = "example.org/pause:9"
    [{V2}.containerd]
      default_runtime_name = "runc"
      [{V2}.containerd.runtimes]
        [{V2}.containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [{V2}.containerd.runtimes.runc.options]
            BinaryName = ""
            SystemdCgroup = false
    [{V2}.registry]
      config_path = "/etc/containerd/certs.d"
      [{V2}.registry.mirrors]
  [plugins."io.containerd.internal.v1.opt"]
    path = "/opt/containerd"
"""

FAKE_CONTAINERD = """#!/bin/sh
# fake containerd: `containerd --version`, `containerd --config FILE config dump`
if [ "$1" = --version ]; then
  echo "containerd github.com/containerd/containerd {version} {version}-1"
  exit 0
fi
echo "$@" >> "{log}"
cp "$2" "{given}"
{barrier}
if [ -n "$FAKE_CONTAINERD_FAIL" ]; then
  echo "time=x level=info msg=starting" >&2
  echo "containerd: failed to load TOML from $2: invalid plugin key" >&2
  exit 1
fi
cat "{dump}"
"""

BARRIER = """touch "{dir}/arrived.$$"; i=0
while [ "$(ls "{dir}" | grep -c '^arrived')" -lt 2 ] && [ $i -lt 30 ]; do
  sleep 0.1; i=$((i+1))
done"""


def fake_containerd(
    tmp_path: Path, monkeypatch=None, dump: str = DUMP, barrier="", version="1.7.24~ds1"
) -> Path:
    """A fake containerd in tmp_path/bin; returns the file where it copies the config given."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "dump.toml").write_text(dump)
    exe = bindir / "containerd"
    exe.write_text(
        FAKE_CONTAINERD.format(
            log=tmp_path / "containerd.log",
            given=tmp_path / "given.toml",
            dump=tmp_path / "dump.toml",
            barrier=barrier,
            version=version,
        )
    )
    exe.chmod(0o755)
    if monkeypatch is not None:
        monkeypatch.setattr(containerd, "CONTAINERD", str(exe))
    return tmp_path / "given.toml"
