"""The wheels the one-GPU run carries, fetched here and checked against the GPU image.

The GPU machine has no network, so whatever its image lacks must travel with the tree:
the pins of ``tools/gpu-wheels.txt``, fetched into ``.whl/`` (ignored by git, named in
the device call's ``carry``) for CPython 3.12 on manylinux x86-64. A wheel that does not
match the image, a second version of one distribution (pip then refuses the whole
install), or a requirement that neither the carried wheels nor the image meet would
only show on the machine, minutes into its short lease; :func:`check` finds each here.
The tree and the wheels travel together under one limit (:data:`LIMIT_BYTES`).
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from bench.onegpu import image

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "tools" / "gpu-wheels.txt"
WHEELS = ROOT / ".whl"
LIMIT_BYTES = 64 * 2**20
"""What travels to the device machine: the tree (tracked files and untracked ones git
does not ignore) and the carried paths together."""
FETCH_TIMEOUT_S = 600.0


def pins(path: Path = PINS) -> dict[NormalizedName, Requirement]:
    """The pinned requirements, by distribution name; each must be ``name==version``."""
    out: dict[NormalizedName, Requirement] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        req = Requirement(text)
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or req.extras or req.marker:
            raise ValueError(f"{path}:{number}: {text!r} is not NAME==VERSION")
        name = canonicalize_name(req.name)
        if name in out:
            raise ValueError(f"{path}:{number}: {req.name} is pinned twice")
        out[name] = req
    return out


def pinned_version(req: Requirement) -> Version:
    return Version(next(iter(req.specifier)).version)


@dataclass(frozen=True, slots=True)
class Wheel:
    path: Path
    name: NormalizedName
    version: Version
    requires: tuple[str, ...]
    """``Requires-Dist`` of its metadata."""

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def read_wheel(path: Path) -> Wheel:
    name, version, _, _ = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        message = email.parser.Parser().parsestr(zf.read(meta).decode())
    return Wheel(path=path, name=name, version=version, requires=tuple(message.get_all("Requires-Dist") or ()))


def matches_image(filename: str) -> bool:
    """Whether one of the wheel's tags is one the image's Python installs."""
    _, _, _, tags = parse_wheel_filename(filename)
    return bool(tags & image.supported())


@dataclass(slots=True)
class Report:
    wheels: list[Wheel] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tree_bytes: int = 0

    @property
    def wheel_bytes(self) -> int:
        return sum(w.size for w in self.wheels)

    @property
    def ok(self) -> bool:
        return not self.problems


def check(directory: Path = WHEELS, pinned: dict[NormalizedName, Requirement] | None = None) -> Report:
    """Every pin has exactly one wheel there, of its version; every wheel is pinned,
    matches the image's tags, and has each requirement met by another carried wheel or
    by the image; the tree and the wheels fit :data:`LIMIT_BYTES` together."""
    pinned = pins() if pinned is None else pinned
    report = Report(tree_bytes=tree_bytes())
    found = sorted(directory.glob("*.whl")) if directory.is_dir() else []
    by_name: dict[NormalizedName, list[Wheel]] = {}
    for path in found:
        try:
            wheel = read_wheel(path)
        except (ValueError, KeyError, StopIteration, zipfile.BadZipFile) as err:
            report.problems.append(f"{path.name}: not a readable wheel ({err})")
            continue
        by_name.setdefault(wheel.name, []).append(wheel)
        report.wheels.append(wheel)
        if not matches_image(path.name):
            report.problems.append(f"{path.name}: no tag for CPython 3.12 on manylinux x86-64 (glibc <= 2.39)")
    for name, req in pinned.items():
        have = by_name.get(name, [])
        if not have:
            report.problems.append(f"{req}: no wheel in {directory} (make gpu-wheels)")
        elif len(have) > 1:
            report.problems.append(f"{name}: {len(have)} wheels; pip installs none when two versions are given")
        elif have[0].version != pinned_version(req):
            report.problems.append(f"{have[0].path.name}: pinned {req}")
    for name in sorted(set(by_name) - set(pinned)):
        report.problems.append(f"{by_name[name][0].path.name}: not pinned in {PINS.name}")
    carried = {w.name: w for w in report.wheels}
    for wheel in report.wheels:
        _requirements(wheel, carried, report)
    total = report.tree_bytes + report.wheel_bytes
    if total > LIMIT_BYTES:
        report.problems.append(f"the tree and the wheels come to {total / 2**20:.1f} MiB, over the 64 MiB that travel")
    return report


def _requirements(
    wheel: Wheel, carried: dict[NormalizedName, Wheel], report: Report, extras: tuple[str, ...] = ("",)
) -> None:
    """Each of ``wheel``'s requirements (under the image's markers, with ``extras``) met
    by a carried wheel's version, by the image's torch, or by a distribution of the
    image's list (by name: its versions were not recorded, said in the notes)."""
    env = image.marker_environment()
    for text in wheel.requires:
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate(env | {"extra": e}) for e in extras):
            continue
        name = canonicalize_name(req.name)
        if name in carried:
            if not req.specifier.contains(carried[name].version, prereleases=True):
                report.problems.append(f"{wheel.name} needs {req}; {carried[name].path.name} is carried")
            elif req.extras:
                _requirements(carried[name], carried, report, tuple(sorted(req.extras)))
        elif name == "torch":
            if not req.specifier.contains(image.TORCH, prereleases=True):
                report.problems.append(f"{wheel.name} needs {req}; the image has torch {image.TORCH}")
        elif name in image.PACKAGES:
            if str(req.specifier):
                report.notes.append(f"{wheel.name} needs {req}: the image has {name} (version not recorded)")
        else:
            report.problems.append(f"{wheel.name} needs {req}: neither carried nor on the image")


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what the device call sends besides the carried paths: tracked files and
    untracked ones git does not ignore, as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    total = 0
    for name in listed:
        path = root / name.decode(errors="surrogateescape")
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def fetch(directory: Path = WHEELS, *, progress: Callable[[str], None] = print) -> Report:
    """Download the pinned wheels that are not there yet for the image's Python and
    platform (``pip download``, no dependencies: the pins are the closure), remove any
    other wheel from ``directory`` (a second version stops the install), then check."""
    pinned = pins()
    directory.mkdir(parents=True, exist_ok=True)
    have: dict[NormalizedName, Wheel] = {}
    for path in sorted(directory.glob("*.whl")):
        wheel = read_wheel(path)
        want = pinned.get(wheel.name)
        if want is None or pinned_version(want) != wheel.version or wheel.name in have:
            progress(f"gpu-wheels: removing {path.name} (not pinned at that version)")
            path.unlink()
        else:
            have[wheel.name] = wheel
    missing = [str(req) for name, req in pinned.items() if name not in have]
    if missing:
        progress(f"gpu-wheels: fetching {len(missing)} wheel(s) for CPython 3.12, manylinux x86-64 into {directory}")
        argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps"]
        argv += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "-d", str(directory)]
        for plat in image.platforms():
            argv += ["--platform", plat]
        done = subprocess.run([*argv, *missing], capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        if done.returncode != 0:
            tail = [line for line in (done.stderr or done.stdout).splitlines() if "is ignored" not in line][-5:]
            raise RuntimeError("pip download failed: " + " / ".join(tail))
    return check(directory, pinned)
