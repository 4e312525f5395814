"""The simulated NVIDIA CUDA repository: built from its catalogue into real .deb files and
signed apt indexes, with NVIDIA's naming and version rules (branch metapackages, the
fabric manager at exactly the driver's version, named per branch up to 575 and unversioned
from 580)."""

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.sim import fabric, nvidiarepo

ROOT = Path(__file__).resolve().parents[3]


def sim_dir(tmp: Path) -> Path:
    """A copy of the simulator's fabricmanager/ (the stand-in, its unit and config)."""
    d = tmp / "sim"
    d.mkdir(parents=True)
    shutil.copytree(fabric.STANDIN_DIR, d / "fabricmanager")
    return d


def fake_debian_deb(tmp: Path, spec: dict) -> bytes:
    """A stand-in for the Debian package a catalogue entry names (no network in unit
    tests): a .deb at the same pool path whose ``member`` says which package it is."""
    name = spec["pool"].rsplit("/", 1)[-1]
    stage = tmp / "stage" / name
    member = stage / spec["member"]
    member.parent.mkdir(parents=True)
    member.write_text(f"#!/bin/sh\necho 'stands in for {name}'\n")
    member.chmod(0o755)
    (stage / "DEBIAN").mkdir()
    (stage / "DEBIAN/control").write_text(
        f"Package: nvidia-smi\nVersion: {name.split('_')[1]}\nArchitecture: amd64\n"
        "Maintainer: test <t@localhost>\nDescription: stand-in\n"
    )
    out = tmp / "mirror" / spec["pool"]
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(stage), str(out)],
                   check=True, capture_output=True)  # fmt: skip
    return out.read_bytes()


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """The real catalogue with its Debian packages stood in for (fake_debian_deb) on a
    file:// mirror, and a cache of this test's own: (catalogue path, mirror, {pool: bytes})."""
    tmp = tmp_path_factory.mktemp("offline")
    doc = nvidiarepo.load_catalogue()
    fakes = {}
    for pkg in doc["packages"]:
        for entry in pkg["files"]:
            if "debian" in entry:
                data = fake_debian_deb(tmp, entry["debian"])
                fakes[entry["debian"]["pool"]] = data
                entry["debian"]["sha256"] = hashlib.sha256(data).hexdigest()
    path = tmp / "catalogue.json"
    path.write_text(json.dumps(doc))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUNODE_CACHE", str(tmp / "cache"))
        mp.setattr(nvidiarepo.images, "MIRROR", f"file://{tmp / 'mirror'}")
        yield path, tmp / "mirror", fakes


@pytest.fixture(scope="module")
def built(tmp_path_factory, offline):
    tmp = tmp_path_factory.mktemp("nvrepo")
    repo = nvidiarepo.build(
        tmp / "cache", catalogue=offline[0], sim_dir=sim_dir(tmp), log=lambda *_: None
    )
    return repo


@pytest.fixture(scope="module")
def catalogue():
    return nvidiarepo.load_catalogue()


def repo_dir(repo, rid="debian12") -> Path:
    return repo.www / repo.repos[rid]


def stanzas(text: str) -> list[dict]:
    out = []
    for block in text.strip().split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith(" "):
                fields[key] += "\n" + line
            else:
                key, _, value = line.partition(": ")
                fields[key] = value
        out.append(fields)
    return out


def branch_of(version: str) -> str:
    return version.split(".")[0]


def test_catalogue_every_package_cites_a_source(catalogue):
    for p in catalogue["packages"]:
        assert p["sources"], p["name"]
        for s in p["sources"]:
            assert catalogue["sources"][s]
    assert set(catalogue["repos"]) == {"debian12", "debian13"}


def test_product_never_reads_the_catalogue():
    src = ROOT / "src" / "gpunode"
    for path in src.rglob("*.py"):
        if path.is_relative_to(src / "sim"):
            continue
        text = path.read_text()
        assert "nvidia-repo.json" not in text and "nvidiarepo" not in text, path


def test_every_deb_is_valid_and_packages_lists_exactly_the_catalogue(built, catalogue):
    for rid in catalogue["repos"]:
        d = repo_dir(built, rid)
        want = {(p["name"], p["version"]) for p in catalogue["packages"] if rid in p["repos"]}
        index = stanzas((d / "Packages").read_text())
        assert {(s["Package"], s["Version"]) for s in index} == want
        debs = sorted(d.glob("*.deb"))
        assert len(debs) == len(want)
        for s in index:
            deb = d / s["Filename"].removeprefix("./")
            info = subprocess.run(["dpkg-deb", "--info", str(deb)], capture_output=True, check=True)
            assert f"Package: {s['Package']}".encode() in info.stdout
            data = deb.read_bytes()
            assert int(s["Size"]) == len(data)
            assert s["SHA256"] == hashlib.sha256(data).hexdigest()
        gz = subprocess.run(["zcat", str(d / "Packages.gz")], capture_output=True, check=True)
        assert gz.stdout == (d / "Packages").read_bytes()


def test_relations_are_the_catalogues(built, catalogue):
    index = {
        (s["Package"], s["Version"]): s for s in stanzas((repo_dir(built) / "Packages").read_text())
    }
    for p in catalogue["packages"]:
        if "debian12" not in p["repos"]:
            continue
        s = index[(p["name"], p["version"])]
        for key in ("depends", "provides", "conflicts", "replaces"):
            assert s.get(key.capitalize(), "") == ", ".join(p[key])


def test_release_hashes_the_indexes(built):
    d = repo_dir(built)
    release = (d / "Release").read_text()
    assert release.startswith("Origin: NVIDIA\nLabel: NVIDIA CUDA\n")
    for name in ("Packages", "Packages.gz"):
        data = (d / name).read_bytes()
        assert re.search(rf"^ {hashlib.sha256(data).hexdigest()} +{len(data)} {name}$",
                         release, re.M)  # fmt: skip


def gpgv(keyring: Path, *files: Path) -> int:
    return subprocess.run(
        ["gpgv", "--keyring", str(keyring), *map(str, files)], capture_output=True, check=False
    ).returncode


def test_inrelease_verifies_with_the_exported_key(built, tmp_path):
    d = repo_dir(built)
    assert gpgv(built.keyring, d / "InRelease") == 0
    assert gpgv(built.keyring, d / "Release.gpg", d / "Release") == 0
    # the .pub at the repository's root, dearmored as an operator does (gpg --dearmor)
    pub = d / built.public_key
    assert pub.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert re.fullmatch(r"[0-9a-f]{8}\.pub", pub.name)
    ring = tmp_path / "ring.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "--output", str(ring), str(pub)], check=True)
    assert gpgv(ring, d / "InRelease") == 0
    # the inline-signed text is the Release file
    text = (d / "InRelease").read_text()
    assert (d / "Release").read_text().splitlines()[0] in text


def test_tampered_release_fails_verification(built, tmp_path):
    d = repo_dir(built)
    inrelease = tmp_path / "InRelease"
    inrelease.write_text((d / "InRelease").read_text().replace("Label: NVIDIA CUDA", "Label: X"))
    assert gpgv(built.keyring, inrelease) != 0
    release = tmp_path / "Release"
    release.write_text((d / "Release").read_text() + " 0 0 extra\n")
    assert gpgv(built.keyring, d / "Release.gpg", release) != 0
    # and another key does not verify the real one
    home = tmp_path / "gnupg"
    other = nvidiarepo.ensure_key(tmp_path)
    ring = tmp_path / "other.gpg"
    ring.write_bytes(
        subprocess.run(
            ["gpg", "--batch", "--homedir", str(home), "--export", other],
            capture_output=True,
            check=True,
        ).stdout
    )
    nvidiarepo.stop_agent(home)
    assert gpgv(ring, d / "InRelease") != 0


def test_each_branch_has_two_driver_versions_and_fm_at_each(catalogue):
    pk = catalogue["packages"]
    drivers: dict[str, set[str]] = {}
    for p in pk:
        m = re.fullmatch(r"cuda-drivers-(\d+)", p["name"])
        if m:
            drivers.setdefault(m.group(1), set()).add(p["version"])
    assert set(drivers) >= {"550", "570", "580"}
    for branch, versions in drivers.items():
        assert len(versions) >= 2, branch
        fm_name = f"nvidia-fabricmanager-{branch}" if int(branch) <= 575 else "nvidia-fabricmanager"
        fm = {
            p["version"] for p in pk if p["name"] == fm_name and branch_of(p["version"]) == branch
        }
        assert fm == versions, branch
        for v in versions:
            assert {p["version"] for p in pk if p["name"] == "nvidia-driver"} >= {v}
            meta = next(
                p for p in pk if p["name"] == f"cuda-drivers-fabricmanager-{branch}"
                and p["version"] == v
            )  # fmt: skip
            assert meta["depends"] == [f"{fm_name} (= {v})", f"cuda-drivers-{branch} (= {v})"]
            cd = next(p for p in pk if p["name"] == "cuda-drivers" and p["version"] == v)
            assert cd["depends"] == [f"cuda-drivers-{branch} (= {v})"]
            pins = {p["name"] for p in pk}
            assert f"nvidia-driver-pinning-{branch}" in pins
            assert f"nvidia-driver-pinning-{v.rsplit('-', 1)[0]}" in pins


def test_fabric_manager_naming_580_vs_575(catalogue):
    pk = catalogue["packages"]
    names = {p["name"] for p in pk}
    for p in pk:
        if p["name"].startswith("nvidia-fabricmanager-") and "-dev" not in p["name"]:
            branch = p["name"].rsplit("-", 1)[1]
            assert int(branch) <= 575
            assert p["provides"] == p["conflicts"] == p["replaces"] == ["nvidia-fabricmanager"]
        if p["name"] == "nvidia-fabricmanager":
            branch = branch_of(p["version"])
            assert int(branch) >= 580
            assert p["provides"] == [f"nvidia-fabricmanager-{branch}"]
            assert f"nvidia-fabricmanager-{branch}" not in names  # only virtual from 580
    # cuda-drivers-580 keeps NVIDIA's >= on the branch's first release (the trap)
    cd580 = [p for p in pk if p["name"] == "cuda-drivers-580"]
    assert all("nvidia-driver (>= 580.65.06)" in p["depends"] for p in cd580)


def deb_file(deb: Path, member: str) -> bytes:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    out = subprocess.run(["tar", "-xO", f".{member}"], input=tar.stdout, capture_output=True,
                         check=True)  # fmt: skip
    return out.stdout


def fm_debs(repo) -> list[tuple[Path, str]]:
    """Every fabric manager .deb (not -dev) of debian12, with its package version."""
    out = []
    for deb in sorted(repo_dir(repo).glob("nvidia-fabricmanager*.deb")):
        if "-dev" not in deb.name:
            out.append((deb, deb.name.split("_")[1]))
    return out


def extract(deb: Path, where: Path) -> Path:
    where.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(where)], check=True, capture_output=True)
    return where


def test_fabric_manager_carries_the_stand_in_at_its_own_version(built, tmp_path):
    """Each FM package: the stand-in at /usr/bin/nv-fabricmanager with the package's
    upstream version baked in (FM runs only at exactly the driver's), the unit and the
    config (a conffile) from sim/fabricmanager/."""
    debs = fm_debs(built)
    assert len(debs) >= 8 and {v.split(".")[0] for _, v in debs} >= {"535", "550", "570", "580"}
    for deb, version in debs:
        root = extract(deb, tmp_path / deb.stem)
        standin = (root / "usr/bin/nv-fabricmanager").read_text()
        upstream = version.rsplit("-", 1)[0]
        assert re.findall(r'^FM_VERSION = "(.*)"$', standin, re.M) == [upstream], deb.name
        assert standin == fabric.render_standin(upstream)
        assert (root / "lib/systemd/system/nvidia-fabricmanager.service").read_bytes() == (
            fabric.UNIT.read_bytes())  # fmt: skip
        assert (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_bytes() == (
            (fabric.STANDIN_DIR / "fabricmanager.cfg").read_bytes())  # fmt: skip
        listing = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True,
                                 check=True).stdout.decode()  # fmt: skip
        assert re.search(r"^-rwxr-xr-x root/root .* \./usr/bin/nv-fabricmanager$", listing, re.M)
        conffiles = subprocess.run(["dpkg-deb", "-I", str(deb), "conffiles"],
                                   capture_output=True, check=True).stdout  # fmt: skip
        assert conffiles == b"/usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
    pin = deb_file(next(repo_dir(built).glob("nvidia-driver-pinning-580_*.deb")),
                   "/etc/apt/preferences.d/nvidia-driver-pinning-580.pref")  # fmt: skip
    assert b"Pin: version 580.*\n" in pin


def test_the_extracted_stand_in_says_its_version_and_refuses_another_driver(built, tmp_path):
    """The packaged stand-in runs: -v prints the package's version. It has no root
    override (it reads /proc/driver), so the driver it meets is faked in a mount namespace
    (test_fabric's harness) where unshare is allowed: the same version trains the fabric,
    another exits 1 with NVIDIA's mismatch line."""
    from .test_fabric import STATE, in_node, node_script
    from .test_mocknvml import _UNSHARE_PROBLEM

    deb = next(d for d, v in fm_debs(built) if v.startswith("550.163.01"))
    root = extract(deb, tmp_path / "fm")
    standin = root / "usr/bin/nv-fabricmanager"
    proc = subprocess.run([sys.executable, str(standin), "-v"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "Fabric Manager version is : 550.163.01\n")
    if _UNSHARE_PROBLEM is not None:
        pytest.skip(f"running it against a faked driver needs unshare -m: {_UNSHARE_PROBLEM}")
    body = f'$FM -c $CFG; echo "exit $?"; cat {STATE} 2>/dev/null || echo "no state"; ' + (
        f"kill $(cat {fabric.PID_FILE}) 2>/dev/null; true")  # fmt: skip
    for profile, want in (("h100x8", ["exit 0", "state=3"]), ("a100x4", ["exit 1", "no state"])):
        (tmp_path / profile).mkdir()
        script = node_script(profile, "550.163.01", body, tmp_path / profile)
        script = script.replace(str(tmp_path / profile / "nv-fabricmanager"), str(standin))
        proc = in_node(script)
        assert proc.stdout.splitlines() == want, proc.stderr
    # a100x4's profile loads driver 535.261.03: FM 550.163.01 meets another driver
    assert "driver interface version 550.163.01 don't match with driver version 535" in (
        proc.stderr)  # fmt: skip


def small_catalogue(tmp: Path) -> Path:
    doc = nvidiarepo.load_catalogue()
    keep = {"nvidia-fabricmanager-570", "cuda-drivers-570", "libnvidia-ml1"}
    doc["packages"] = [p for p in doc["packages"] if p["name"] in keep]
    path = tmp / "catalogue.json"
    path.write_text(json.dumps(doc))
    return path


def test_build_is_reproducible_and_rebuilds_only_when_inputs_change(tmp_path):
    cat, sims = small_catalogue(tmp_path), sim_dir(tmp_path)
    logs: list[str] = []
    a = nvidiarepo.build(tmp_path / "a", catalogue=cat, sim_dir=sims, log=logs.append)
    b = nvidiarepo.build(tmp_path / "b", catalogue=cat, sim_dir=sims, log=lambda *_: None)
    da, db = repo_dir(a), repo_dir(b)
    debs = sorted(p.name for p in da.glob("*.deb"))
    assert debs and debs == sorted(p.name for p in db.glob("*.deb"))
    for name in [*debs, "Packages", "Packages.gz", "Release"]:
        assert (da / name).read_bytes() == (db / name).read_bytes(), name
    built = len(logs)
    again = nvidiarepo.build(tmp_path / "a", catalogue=cat, sim_dir=sims, log=logs.append)
    assert again.digest == a.digest and len(logs) == built  # nothing rebuilt
    with (sims / "fabricmanager/nv-fabricmanager").open("a") as fh:
        fh.write("# changed\n")
    changed = nvidiarepo.build(tmp_path / "a", catalogue=cat, sim_dir=sims, log=logs.append)
    assert changed.digest != a.digest and len(logs) > built
    assert changed.fingerprint == a.fingerprint  # the key is generated once
    assert gpgv(changed.keyring, repo_dir(changed) / "InRelease") == 0


def test_missing_stand_in_is_one_line_naming_it(tmp_path):
    cat, sims = small_catalogue(tmp_path), sim_dir(tmp_path)
    (sims / "fabricmanager/nv-fabricmanager").unlink()
    with pytest.raises(nvidiarepo.RepoError, match=r"nv-fabricmanager.*No such file"):
        nvidiarepo.build(tmp_path / "c", catalogue=cat, sim_dir=sims, log=lambda *_: None)


def test_endpoint_is_nvidias_layout(built):
    ep = nvidiarepo.endpoint(built, "172.17.0.9")
    assert ep.url == "http://172.17.0.9/compute/cuda/repos/debian12/x86_64/"
    assert ep.key_url == ep.url + built.public_key
    assert ep.line == f"deb [signed-by=/etc/apt/keyrings/nvidia-cuda.asc] {ep.url} /"
    with pytest.raises(nvidiarepo.RepoError, match="no debian11"):
        nvidiarepo.endpoint(built, "172.17.0.9", "debian11")


@pytest.fixture(autouse=True, scope="module")
def _tools():
    for tool in ("dpkg-deb", "gpg", "gpgv"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (Debian: dpkg, gpg, gpgv)", pytrace=False)


def test_sim_up_serves_it_when_the_inventory_asks_for_nvidias_repository(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    n1: {gpunode_sim_profile: h100x8}\n")
    assert not nvidiarepo.wanted(inv)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars/all.yml").write_text("nvidia_driver_source: distro\n")
    assert not nvidiarepo.wanted(inv)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars/n1.yml").write_text("nvidia_driver_source: cuda-repo\n")
    assert nvidiarepo.wanted(inv)
    (tmp_path / "host_vars/n1.yml").unlink()
    inv.write_text(
        "all:\n  children:\n    dgx:\n      hosts:\n        n1: {gpunode_sim_profile: h100x8,"
        " cuda_toolkit_source: cuda-repo}\n"
    )
    assert nvidiarepo.wanted(inv)
    # the shipped simulated cluster does: its HGX node installs from NVIDIA's repository
    assert nvidiarepo.wanted(ROOT / "inventories/sim/hosts.yml")


def test_every_apt_preferences_file_has_a_name_apt_reads(catalogue):
    """apt reads a file in /etc/apt/preferences.d only when its name has no extension or
    `.pref` and holds only letters, digits, `-`, `_` and `.` (apt_preferences(5)): a pinning
    package's `nvidia-driver-pinning-550.163.01` was silently ignored (its "extension" is
    `01`), and the driver's dependencies then resolved to another branch."""
    paths = [f["path"] for p in catalogue["packages"] for f in p.get("files", [])
             if f["path"].startswith("/etc/apt/preferences.d/")]  # fmt: skip
    assert paths
    for path in paths:
        name = path.rsplit("/", 1)[1]
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", name), path
        assert "." not in name or name.endswith(".pref"), path


def extracted(deb: Path, path: str, tmp: Path) -> Path | None:
    out = tmp / deb.stem
    subprocess.run(["dpkg-deb", "-x", str(deb), str(out)], check=True)
    found = out / path.lstrip("/")
    return found if found.exists() else None


def test_nvidia_smi_is_debians_binary_where_debian_ships_the_version(built, tmp_path):
    """NVIDIA's nvidia-smi packages of the versions Debian ships (535.261.03, 550.163.01)
    carry /usr/bin/nvidia-smi as Debian's package has it (here the stand-in on the test's
    mirror, checked by its sha256); the other versions carry only the note."""
    smi = sorted(repo_dir(built).glob("nvidia-smi_*.deb"))
    carried = {}
    for deb in smi:
        binary = extracted(deb, "/usr/bin/nvidia-smi", tmp_path)
        if binary is not None:
            carried[deb.name] = (binary.read_text(), binary.stat().st_mode & 0o777)
    assert carried == {
        "nvidia-smi_535.261.03-1_amd64.deb": (
            "#!/bin/sh\necho 'stands in for nvidia-smi_535.261.03-1_amd64.deb'\n", 0o755),
        "nvidia-smi_550.163.01-1_amd64.deb": (
            "#!/bin/sh\necho 'stands in for nvidia-smi_550.163.01-2_amd64.deb'\n", 0o755),
    }  # fmt: skip
    info = subprocess.run(["dpkg-deb", "-f", str(repo_dir(built) / "nvidia-smi_550.163.01-1_amd64.deb"),
                           "Description"], capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "NVIDIA's binary as Debian's nvidia-smi_550.163.01-2_amd64.deb does" in info
    assert len(smi) > len(carried)  # other versions: the note only


def test_the_catalogues_debian_files_are_nvidia_smi_of_the_same_version(catalogue):
    """Each Debian file names nvidia-graphics-drivers' pool, a sha256, and a package of the
    same upstream version as the catalogue's (no network: the build checks the bytes)."""
    found = []
    for pkg in catalogue["packages"]:
        for entry in pkg["files"]:
            if "debian" not in entry:
                continue
            spec = entry["debian"]
            name = spec["pool"].rsplit("/", 1)[-1]
            assert spec["pool"].startswith("pool/non-free/n/nvidia-graphics-drivers/")
            assert re.fullmatch(r"[0-9a-f]{64}", spec["sha256"])
            assert name.startswith(f"{pkg['name']}_{nvidiarepo.upstream_version(pkg['version'])}-")
            found.append((pkg["name"], nvidiarepo.upstream_version(pkg["version"])))
    assert sorted(found) == [("nvidia-smi", "535.261.03"), ("nvidia-smi", "550.163.01")]


def test_a_debian_package_not_as_named_is_one_line(offline, tmp_path):
    fakes = offline[2]
    pool = sorted(fakes)[0]
    spec = {"pool": pool, "sha256": "0" * 64, "member": "usr/lib/nvidia/current/nvidia-smi"}
    with pytest.raises(nvidiarepo.RepoError, match=r"is not the package the catalogue names"):
        nvidiarepo.debian_deb(spec, log=lambda *_: None)
    gone = {**spec, "pool": "pool/non-free/n/nvidia-graphics-drivers/nvidia-smi_1.2-3_amd64.deb"}
    with pytest.raises(nvidiarepo.RepoError, match=r"^cannot download file://.*nvidia-smi_1.2-3"):
        nvidiarepo.debian_deb(gone, log=lambda *_: None)
    member = {**spec, "sha256": hashlib.sha256(fakes[pool]).hexdigest(), "member": "usr/bin/x"}
    with pytest.raises(nvidiarepo.RepoError, match=r"has no file usr/bin/x"):
        nvidiarepo.debian_member(member)


def test_a_debian_package_the_nodes_downloaded_is_taken_from_their_cache(offline, tmp_path):
    """No download when a node's apt already fetched the file (the shared apt cache)."""
    _, _, fakes = offline
    pool = sorted(fakes)[0]
    name = pool.rsplit("/", 1)[-1]
    spec = {"pool": pool, "sha256": hashlib.sha256(fakes[pool]).hexdigest(), "member": "x"}
    store = nvidiarepo.cache_root() / "debian" / name
    store.unlink(missing_ok=True)
    shared = nvidiarepo.images.cache_dir() / "apt" / "trixie" / name
    shared.parent.mkdir(parents=True, exist_ok=True)
    shared.write_bytes(fakes[pool])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nvidiarepo.images, "MIRROR", "http://127.0.0.1:9/unreachable")
        assert nvidiarepo.debian_deb(spec, log=lambda *_: None).read_bytes() == fakes[pool]
