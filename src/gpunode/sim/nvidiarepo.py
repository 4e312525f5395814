"""The simulated NVIDIA CUDA apt repository (host side).

NVIDIA serves its driver, fabric manager and CUDA packages for Debian from flat apt
repositories (``deb [signed-by=KEYRING] https://developer.download.nvidia.com/compute/cuda/
repos/debian12/x86_64/ /``), signed with the key it publishes next to them (``3bf863cc.pub``).
The simulator serves its nodes the same: one catalogue (``nvidia-repo.json``: NVIDIA's
package names, versions and relations, each with its sources) built into real ``.deb`` files
(``dpkg-deb --build``), ``Packages``/``Packages.gz`` and a ``Release`` signed (``InRelease``,
``Release.gpg``) with a key the simulator generates once. The packages' contents are the
simulator's: a note per package, apt preferences for the pinning packages, and in each
fabric manager package the stand-in (``fabricmanager/nv-fabricmanager`` rendered at the
package's version by gpunode.sim.fabric.render_standin, as /usr/bin/nv-fabricmanager), its
unit (/lib/systemd/system/nvidia-fabricmanager.service) and its configuration
(/usr/share/nvidia/nvswitch/fabricmanager.cfg, a conffile). The one file of NVIDIA's:
/usr/bin/nvidia-smi in the ``nvidia-smi`` packages of the versions Debian also ships
(535.261.03, 550.163.01), NVIDIA's binary taken from Debian's package (``debian``: its pool
path and sha256; debian_deb), so that an operator's first command works on a node installed
from this repository; other versions' nvidia-smi carry only a note. No library of NVIDIA's
(none shadows the mock NVML).

The build is reproducible (fixed dates, sorted, root-owned; only the signatures carry the
signing time) and happens again only when its inputs change (the catalogue, the files it
carries, this module, the key). A small container (``CONTAINER``) serves the build over
http on the simulator's Docker network; ``endpoint`` gives its URL and key locations for
inventories. The product never reads the catalogue: it learns the repository from apt.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..nvidia import fabric as nvfabric
from ..util.command import OperationError
from . import fabric, images
from .docker import docker, exec_

CATALOGUE = Path(__file__).with_name("nvidia-repo.json")
SIM_DIR = Path(__file__).parent  # a file's "from" is relative to it
CONTAINER = "gpunode-sim-nvidia-repo"
LABEL = "gpunode.sim.nvidia-repo"
SERVE_DIR = "/srv/nvidia-repo"
KEY_UID = "gpunode simulator: NVIDIA CUDA repository (not NVIDIA's) <gpunode-sim@localhost>"
KEYRING = "cuda-archive-keyring.gpg"  # the binary keyring, named as NVIDIA's cuda-keyring names it
MAINTAINER = "gpunode simulator <gpunode-sim@localhost>"
HASHES = (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512"))
PKG_HASHES = (("MD5sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512"))


class RepoError(OperationError, RuntimeError):
    pass


def cache_root() -> Path:
    return images.cache_dir() / "nvidia-repo"


def load_catalogue(path: Path = CATALOGUE) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RepoError(f"cannot read the repository catalogue {path}: {exc}") from None
    seen = set()
    for p in doc["packages"]:
        key = (p["name"], p["version"], p["architecture"])
        if key in seen:
            raise RepoError(f"{path}: {p['name']} {p['version']} is listed twice")
        seen.add(key)
        unknown = [s for s in p["sources"] if s not in doc["sources"]]
        bad_repo = [r for r in p["repos"] if r not in doc["repos"]]
        if unknown or bad_repo:
            raise RepoError(f"{path}: {p['name']} {p['version']}: unknown {unknown or bad_repo}")
    return doc


def _run(argv: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, check=False, **kw)
    except FileNotFoundError:
        raise RepoError(f"{what}: {argv[0]} is not installed") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise RepoError(f"{what} failed: {err[-1]}")
    return proc


# --- the signing key -------------------------------------------------------------------


def _gpg(home: Path, *args: str, what: str, input: bytes | None = None) -> bytes:
    argv = ["gpg", "--batch", "--quiet", "--homedir", str(home), *args]
    return _run(argv, what, input=input).stdout


def stop_agent(home: Path) -> None:
    """gpg starts a gpg-agent for the secret key; it must not outlive the build."""
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"],
                   capture_output=True, check=False)  # fmt: skip


def ensure_key(root: Path) -> str:
    """The simulator's signing key (generated once, kept in root/gnupg); its fingerprint."""
    home = root / "gnupg"
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)

    def listed() -> list[str]:
        out = _gpg(home, "--with-colons", "--list-secret-keys", what="listing the key")
        return [ln.split(":")[9] for ln in out.decode().splitlines() if ln.startswith("fpr:")]

    fprs = listed()
    if not fprs:
        params = (
            "Key-Type: RSA\nKey-Length: 3072\nKey-Usage: sign\n"
            f"Name-Real: {KEY_UID.split(' <')[0]}\nName-Email: gpunode-sim@localhost\n"
            "Expire-Date: 0\n%no-protection\n%commit\n"
        )
        _gpg(home, "--gen-key", what="generating the repository key", input=params.encode())
        fprs = listed()
    return fprs[0]


# --- packages --------------------------------------------------------------------------


def _epoch(doc: dict) -> int:
    return int(email.utils.parsedate_to_datetime(doc["date"]).timestamp())


def upstream_version(version: str) -> str:
    """A Debian version's upstream part: 1:580.105.08-1 -> 580.105.08."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


# The most a Debian package the repository takes a file from may be (nvidia-smi: ~1 MB).
DEBIAN_DEB_MAX = 64 * 1024 * 1024


def debian_deb(spec: dict, log=print) -> Path:
    """The Debian archive's .deb a catalogue entry names (``pool``: its path under the
    mirror, ``sha256``): from cache_root()/debian, else the nodes' shared apt caches, else
    downloaded from the mirror the node images use (images.MIRROR); checked by sha256
    wherever it comes from, kept in cache_root()/debian."""
    name = spec["pool"].rsplit("/", 1)[-1]
    store = cache_root() / "debian"
    store.mkdir(parents=True, exist_ok=True)
    for path in (store / name, *sorted((images.cache_dir() / "apt").glob(f"*/{name}"))):
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == spec["sha256"]:
            if path.parent != store:
                shutil.copyfile(path, store / name)
            return store / name
    url = f"{images.MIRROR.rstrip('/')}/{spec['pool']}"
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            data = resp.read(DEBIAN_DEB_MAX + 1)
    except (OSError, ValueError) as exc:
        raise RepoError(f"cannot download {url}: {exc}") from None
    if len(data) > DEBIAN_DEB_MAX or hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise RepoError(f"{url} is not the package the catalogue names (sha256 {spec['sha256']})")
    tmp = store / f".{name}.tmp"
    tmp.write_bytes(data)
    tmp.replace(store / name)
    log(f"nvidia repository: {name} from {images.MIRROR}")
    return store / name


def debian_member(spec: dict) -> bytes:
    """The file ``member`` of the Debian package ``spec`` names (debian_deb)."""
    deb = debian_deb(spec)
    proc = _run(["dpkg-deb", "--fsys-tarfile", str(deb)], f"reading {deb.name}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for member in tar.getmembers():
            if member.name.lstrip("./") == spec["member"] and member.isfile():
                return tar.extractfile(member).read()
    raise RepoError(f"{deb.name} has no file {spec['member']}")


def _file_bytes(entry: dict, pkg: dict, sim_dir: Path) -> bytes:
    if "debian" in entry:
        return debian_member(entry["debian"])
    if "from" in entry:
        src = sim_dir / entry["from"]
        try:
            if entry.get("render") == "fm-version":
                # the fabric manager stand-in, its version baked in as NVIDIA's binary has
                # its own: the package's (FM runs only at exactly the driver's version)
                return fabric.render_standin(upstream_version(pkg["version"]), src).encode()
            if "render" in entry:
                raise RepoError(f"{pkg['name']}: unknown file rendering {entry['render']!r}")
            return src.read_bytes()
        except OSError as exc:
            raise RepoError(
                f"{pkg['name']} {pkg['version']} carries {entry['path']} from {src}: {exc.strerror}"
            ) from None
        except ValueError as exc:
            raise RepoError(f"{pkg['name']} {pkg['version']}: {exc}") from None
    kind = entry["template"]
    if kind == "pin":
        return (
            f"# {pkg['name']} (gpunode simulator): stands in for NVIDIA's package of that name\n"
            f"Package: {' '.join(entry['packages'])}\n"
            f"Pin: version {entry['pin']}\n"
            "Pin-Priority: 1000\n"
        ).encode()
    if kind == "placeholder":
        return f"{pkg['name']} {pkg['version']} (gpunode simulator)\n".encode()
    raise RepoError(f"{pkg['name']}: unknown file template {kind!r}")


def deb_name(pkg: dict) -> str:
    version = pkg["version"].split(":", 1)[-1]
    return f"{pkg['name']}_{version}_{pkg['architecture']}.deb"


def control_fields(pkg: dict) -> list[tuple[str, str]]:
    fields = [
        ("Package", pkg["name"]),
        ("Version", pkg["version"]),
        ("Architecture", pkg["architecture"]),
        ("Maintainer", MAINTAINER),
        ("Section", pkg["section"]),
        ("Priority", "optional"),
    ]
    for key in ("depends", "provides", "conflicts", "replaces"):
        if pkg.get(key):
            fields.append((key.capitalize(), ", ".join(pkg[key])))
    debian = [e["debian"]["pool"].rsplit("/", 1)[-1] for e in pkg["files"] if "debian" in e]
    carries = (f"this package carries NVIDIA's binary as Debian's {', '.join(debian)} does, "
               "nothing else of NVIDIA's." if debian else
               "this package carries none of NVIDIA's software.")  # fmt: skip
    fields.append(
        ("Description", f"{pkg['description']} (simulated)\n gpunode's simulated NVIDIA CUDA "
         f"repository: {carries}")
    )  # fmt: skip
    return fields


def build_deb(pkg: dict, out: Path, sim_dir: Path, epoch: int) -> Path:
    """One .deb with dpkg-deb, reproducibly (fixed mtimes, root-owned, sorted)."""
    with tempfile.TemporaryDirectory(prefix="gpunode-deb-") as tmp:
        stage = Path(tmp) / "pkg"
        (stage / "DEBIAN").mkdir(parents=True)
        files = [
            *pkg["files"],
            {"path": f"/usr/share/doc/{pkg['name']}/README.gpunode-sim", "template": "placeholder"},
        ]
        size = 0
        conffiles = []
        for entry in files:
            dest = stage / entry["path"].lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = _file_bytes(entry, pkg, sim_dir)
            dest.write_bytes(data)
            dest.chmod(int(entry.get("mode", "0644"), 8))
            size += (len(data) + 1023) // 1024
            if entry.get("conffile"):
                conffiles.append(entry["path"])
        fields = control_fields(pkg)
        fields.insert(5, ("Installed-Size", str(max(size, 1))))
        (stage / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in fields))
        if conffiles:
            (stage / "DEBIAN/conffiles").write_text("".join(f"{c}\n" for c in conffiles))
        for path in sorted(stage.rglob("*"), reverse=True):
            if path.is_dir():
                path.chmod(0o755)
            os.utime(path, (epoch, epoch), follow_symlinks=False)
        os.utime(stage, (epoch, epoch))
        deb = out / deb_name(pkg)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(deb)],
             f"building {deb.name}", env=env)  # fmt: skip
    return deb


def fm_deb(version: str, out: Path, repo_id: str = "debian12", catalogue: Path = CATALOGUE,
           sim_dir: Path = SIM_DIR) -> Path:
    """The repository's fabric manager package at exactly ``version`` (upstream, e.g.
    550.163.01) built into ``out``: for a node that is not provisioned from the repository
    but needs its fabric manager (tests, benchmarks: cluster.install_fabric_manager)."""
    doc = load_catalogue(catalogue)
    fms = [p for p in doc["packages"] if repo_id in p["repos"]
           and nvfabric.PACKAGE_RE.fullmatch(p["name"])
           and upstream_version(p["version"]) == version]  # fmt: skip
    if not fms:
        offered = sorted({upstream_version(p["version"]) for p in doc["packages"]
                          if nvfabric.PACKAGE_RE.fullmatch(p["name"])})  # fmt: skip
        raise RepoError(f"the simulated NVIDIA repository ({repo_id}) has no fabric manager "
                        f"{version}; it has {', '.join(offered)}")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    return build_deb(fms[0], out, sim_dir, _epoch(doc))


def _digests(data: bytes, names) -> dict[str, str]:
    return {field: hashlib.new(algo, data).hexdigest() for field, algo in names}


def packages_index(debs: list[Path]) -> str:
    """The flat repository's Packages file (NVIDIA's: Filename ./NAME)."""
    stanzas = []
    for deb in debs:
        control = _run(["dpkg-deb", "--field", str(deb)], f"reading {deb.name}").stdout.decode()
        data = deb.read_bytes()
        extra = [f"Filename: ./{deb.name}", f"Size: {len(data)}"]
        extra += [f"{k}: {v}" for k, v in _digests(data, PKG_HASHES).items()]
        head, sep, desc = control.partition("\nDescription:")
        stanzas.append(head + "\n" + "\n".join(extra) + sep + desc.rstrip("\n"))
    return "\n\n".join(stanzas) + "\n"


def release_file(repo_dir: Path, date: str, repo: dict) -> str:
    lines = [
        "Origin: NVIDIA",
        "Label: NVIDIA CUDA",
        "Architecture: x86_64",
        f"Description: gpunode's simulated NVIDIA CUDA repository ({repo['path']})",
        f"Date: {date}",
    ]
    files = ["Packages", "Packages.gz"]
    blobs = {f: (repo_dir / f).read_bytes() for f in files}
    for field, algo in HASHES:
        lines.append(f"{field}:")
        for f in files:
            digest = hashlib.new(algo, blobs[f]).hexdigest()
            lines.append(f" {digest} {len(blobs[f]):>16} {f}")
    return "\n".join(lines) + "\n"


def sign(repo_dir: Path, home: Path, fpr: str) -> None:
    release = repo_dir / "Release"
    for args, out in (
        (["--clearsign"], "InRelease"),
        (["--detach-sign", "--armor"], "Release.gpg"),
    ):
        _gpg(home, "--yes", "--digest-algo", "SHA512", "--local-user", fpr, *args,
             "--output", str(repo_dir / out), str(release), what=f"signing {out}")  # fmt: skip


def public_key_name(fpr: str) -> str:
    """NVIDIA names its key file by the key id's last 8 hex digits: 3bf863cc.pub."""
    return f"{fpr[-8:].lower()}.pub"


def inputs_digest(doc_bytes: bytes, doc: dict, sim_dir: Path, fpr: str) -> str:
    h = hashlib.sha256()
    h.update(doc_bytes)
    h.update(Path(__file__).read_bytes())
    h.update(Path(fabric.__file__).read_bytes())  # render_standin
    h.update(fpr.encode())
    for src in sorted({e["from"] for p in doc["packages"] for e in p["files"] if "from" in e}):
        h.update(src.encode())
        try:
            h.update((sim_dir / src).read_bytes())
        except OSError:
            h.update(b"\0missing")
    return h.hexdigest()


@dataclass(frozen=True)
class Repo:
    """A built repository tree: www (what the server serves) and the key's files."""

    root: Path
    www: Path
    fingerprint: str
    digest: str
    repos: dict  # repo id -> path under www

    @property
    def public_key(self) -> str:
        return public_key_name(self.fingerprint)

    @property
    def keyring(self) -> Path:
        return self.root / KEYRING

    @property
    def armored_key(self) -> Path:
        return self.root / self.public_key


def build(
    root: Path | None = None,
    catalogue: Path = CATALOGUE,
    sim_dir: Path = SIM_DIR,
    log=print,
) -> Repo:
    """Build (or find current) the repository under root (default cache_root())."""
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    try:
        return _build(root, catalogue, sim_dir, log)
    finally:
        stop_agent(root / "gnupg")


def _build(root: Path, catalogue: Path, sim_dir: Path, log) -> Repo:
    doc_bytes = catalogue.read_bytes()
    doc = load_catalogue(catalogue)
    fpr = ensure_key(root)
    home = root / "gnupg"
    digest = inputs_digest(doc_bytes, doc, sim_dir, fpr)
    www = root / "www"
    repos = {rid: r["path"] for rid, r in doc["repos"].items()}
    stamp = www / ".gpunode-sim-stamp"
    if stamp.exists() and stamp.read_text() == digest:
        return Repo(root, www, fpr, digest, repos)
    pub = _gpg(home, "--armor", "--export", fpr, what="exporting the key")
    keyring = _gpg(home, "--export", fpr, what="exporting the keyring")
    (root / public_key_name(fpr)).write_bytes(pub)
    (root / KEYRING).write_bytes(keyring)
    tmp = Path(tempfile.mkdtemp(prefix="www.", dir=root))
    try:
        epoch = _epoch(doc)
        for rid, repo in doc["repos"].items():
            repo_dir = tmp / repo["path"]
            repo_dir.mkdir(parents=True)
            pkgs = sorted(
                (p for p in doc["packages"] if rid in p["repos"]),
                key=lambda p: (p["name"], p["version"]),
            )
            debs = [build_deb(p, repo_dir, sim_dir, epoch) for p in pkgs]
            index = packages_index(debs)
            (repo_dir / "Packages").write_text(index)
            with (
                open(repo_dir / "Packages.gz", "wb") as f,
                gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz,
            ):
                gz.write(index.encode())
            (repo_dir / "Release").write_text(release_file(repo_dir, doc["date"], repo))
            sign(repo_dir, home, fpr)
            (repo_dir / public_key_name(fpr)).write_bytes(pub)
            (repo_dir / KEYRING).write_bytes(keyring)
            log(f"nvidia repository {rid}: {len(debs)} packages")
        (tmp / ".gpunode-sim-stamp").write_text(digest)
        tmp.chmod(0o755)
        old = root / "www.old"
        if old.exists():
            shutil.rmtree(old)
        if www.exists():
            www.rename(old)
        tmp.rename(www)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return Repo(root, www, fpr, digest, repos)


# --- serving it to the nodes -----------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where nodes reach a repository: its apt URL, the key's URL (the ``.pub`` as NVIDIA
    publishes it), the keyring on the host and the sources line an operator writes."""

    url: str
    key_url: str
    keyring: str
    line: str

    def as_dict(self) -> dict:
        return {"url": self.url, "key_url": self.key_url, "keyring": self.keyring,
                "line": self.line}  # fmt: skip


def _container(name: str = CONTAINER) -> dict | None:
    proc = docker(["inspect", name], check=False)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


def _address(state: dict) -> str:
    nets = state["NetworkSettings"]["Networks"] or {}
    for net in nets.values():
        if net.get("IPAddress"):
            return net["IPAddress"]
    raise RepoError(f"{state['Name'].lstrip('/')}: the container has no IP address")


PROBE = (
    "import time,urllib.request\nfor i in range(100):\n try:\n"
    "  urllib.request.urlopen('http://127.0.0.1/',timeout=1);break\n"
    " except OSError: time.sleep(0.1)\nelse: raise SystemExit(1)\n"
)


def serve(repo: Repo, image: str, log=print, name: str = CONTAINER) -> str:
    """Serve repo.www over http from a small container of a node image (python3 -m
    http.server, read-only mount) on Docker's default network, where the nodes are; its
    address. A container serving another build is replaced (the build's directory was)."""
    state = _container(name)
    if state is not None:
        labels = state["Config"]["Labels"] or {}
        if state["State"]["Running"] and labels.get(LABEL) == repo.digest:
            return _address(state)
        docker(["rm", "-f", name])
    docker([
        "run", "-d", "--name", name, "--label", f"{LABEL}={repo.digest}",
        "-v", f"{repo.www}:{SERVE_DIR}:ro", "--entrypoint", "python3", image,
        "-m", "http.server", "80", "--directory", SERVE_DIR,
    ])  # fmt: skip
    if exec_(name, ["python3", "-c", PROBE], check=False).returncode != 0:
        raise RepoError(f"{name}: the http server did not answer")
    address = _address(_container(name))
    log(f"nvidia repository: served at http://{address}/ ({name})")
    return address


def stop(name: str = CONTAINER) -> bool:
    if _container(name) is None:
        return False
    docker(["rm", "-f", name])
    return True


def endpoint(repo: Repo, address: str, repo_id: str = "debian12") -> Endpoint:
    if repo_id not in repo.repos:
        raise RepoError(f"the simulated NVIDIA repository has no {repo_id}; it has "
                        f"{', '.join(repo.repos)}")  # fmt: skip
    url = f"http://{address}/{repo.repos[repo_id]}/"
    keyring = "/etc/apt/keyrings/nvidia-cuda.asc"
    return Endpoint(
        url=url,
        key_url=url + repo.public_key,
        keyring=str(repo.armored_key),
        line=f"deb [signed-by={keyring}] {url} /",
    )


SOURCE_VARS = ("nvidia_driver_source", "cuda_toolkit_source")


def wanted(inventory: Path) -> bool:
    """Whether an inventory installs anything from NVIDIA's repository (a source variable
    set to cuda-repo in the inventory file, or in group_vars/host_vars beside it): then
    `gpunode sim up` serves the simulated one."""

    def walk(node) -> bool:
        if isinstance(node, dict):
            return any((k in SOURCE_VARS and v == "cuda-repo") or walk(v) for k, v in node.items())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    paths = [inventory]
    for sub in ("group_vars", "host_vars"):
        d = inventory.parent / sub
        if d.is_dir():
            paths += sorted(p for p in d.rglob("*") if p.suffix in (".yml", ".yaml", ""))
    for path in paths:
        if not path.is_file():
            continue
        try:
            if walk(yaml.safe_load(path.read_text())):
                return True
        except (OSError, yaml.YAMLError):
            continue
    return False


def up(image: str, log=print) -> dict[str, Endpoint]:
    """Build and serve the repository (what `gpunode sim up` runs); every repository's
    endpoint, also written to cache_root()/endpoint.json for inventories and tools."""
    repo = build(log=log)
    address = serve(repo, image, log=log)
    eps = {rid: endpoint(repo, address, rid) for rid in repo.repos}
    (repo.root / "endpoint.json").write_text(
        json.dumps({rid: e.as_dict() for rid, e in eps.items()}, indent=1) + "\n"
    )
    return eps


def down(log=print) -> None:
    if stop():
        log(f"{CONTAINER}: removed")
    (cache_root() / "endpoint.json").unlink(missing_ok=True)
