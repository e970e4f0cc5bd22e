"""Build an offline install bundle of ``iaccode_agui`` for air-gapped hosts.

The bundle is a directory with ``wheelhouse/`` (a wheel of this package plus pinned wheels of everything it
needs at run time), ``requirements.txt`` (exact pins with sha256 hashes, usable with ``--require-hashes``)
and ``INSTALL.txt`` (the two commands to run on the target host).  Only this build needs the package
index; the target host installs with ``pip install --no-index --find-links``.

Pure-Python wheels are taken wherever a project publishes one, so most of the bundle installs on any
platform.  Projects with compiled code only (rpds-py, MarkupSafe) are fetched as binary wheels for each
``--platform`` and the target ``--python-version``; INSTALL.txt names them and the platforms covered.

pip evaluates environment markers against the interpreter running it, not the target version, so after
pip's resolution the dependency graph is walked again from the wheels' own metadata with the target's
markers: a dependency the target needs but pip skipped is fetched, and one it does not need is dropped.

Usage: ``python tools/offline_bundle.py [--out DIR] [--python-version X.Y] [--platform TAG ...] [--archive]``
"""
import argparse
import datetime
import email.parser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

PACKAGE = "iaccode_agui"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PLATFORMS = ("manylinux2014_x86_64",)
MIN_PYTHON = (3, 9)
# Never copied into the build tree: VCS data, caches, earlier build output (stale build/lib files would
# otherwise end up in the wheel) and local virtual environments.
SOURCE_IGNORE = (".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                 ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", ".tox")


class BundleError(RuntimeError):
    """The bundle cannot be built; the message says why and what pip printed."""


class Wheel(NamedTuple):
    path: str
    name: str      # PEP 503 normalized project name
    version: str
    tags: str      # "python-abi-platform" as in the file name

    @property
    def pure(self) -> bool:
        return self.tags.endswith("-none-any")


class Bundle(NamedTuple):
    path: str
    wheels: List[Wheel]
    python_version: str
    platforms: Tuple[str, ...]
    size: int
    archive: Optional[str]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel(path: str) -> Wheel:
    parts = os.path.basename(path)[:-len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise BundleError("not a wheel file name: %s" % path)
    return Wheel(path, normalize(parts[0]), parts[1], "-".join(parts[-3:]))


def describe_platform(tag: str) -> str:
    """A human reading of a wheel platform tag, for INSTALL.txt."""
    match = re.match(r"manylinux(?:_(\d+)_(\d+)|(2014|2010|1))_(\w+)$", tag)
    if match:
        legacy = {"2014": "2.17", "2010": "2.12", "1": "2.5"}
        glibc = "%s.%s" % (match.group(1), match.group(2)) if match.group(1) else legacy[match.group(3)]
        return "Linux %s with glibc %s or newer (%s)" % (match.group(4), glibc, tag)
    match = re.match(r"musllinux_(\d+)_(\d+)_(\w+)$", tag)
    if match:
        return "Linux %s with musl %s.%s or newer, e.g. Alpine (%s)" % (match.group(3), match.group(1),
                                                                        match.group(2), tag)
    match = re.match(r"macosx_(\d+)_(\d+)_(\w+)$", tag)
    if match:
        return "macOS %s.%s or newer on %s (%s)" % (match.group(1), match.group(2), match.group(3), tag)
    if tag.startswith("win"):
        return "Windows (%s)" % tag
    return tag


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def human_size(size: float) -> str:
    if size < 1024:
        return "%d B" % size
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024.0
        if size < 1024:
            break
    return "%.1f %s" % (size, unit)


class Pip:
    """``python -m pip`` calls, every one of them for the target interpreter and platform."""

    def __init__(self, python_version: str, platforms: Sequence[str], python: str = sys.executable) -> None:
        self.python = python
        self.python_version = python_version
        self.platforms = tuple(platforms)
        self.abi = "cp" + python_version.replace(".", "")

    def run(self, args: Sequence[str], what: str) -> None:
        command = [self.python, "-m", "pip", "--disable-pip-version-check"] + list(args)
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.strip().splitlines()[-15:])
            raise BundleError("%s failed (exit %d): %s\n%s" % (what, result.returncode, " ".join(command), tail))

    def _download(self, requirement: str, dest: str, platform: str, deps: bool, pure: bool = False) -> None:
        args = ["download", "--only-binary=:all:", "--python-version", self.python_version, "-d", dest]
        if pure:
            args += ["--platform", "any", "--implementation", "py", "--abi", "none"]
        else:
            args += ["--platform", platform, "--implementation", "cp", "--abi", self.abi]
        if not deps:
            args.append("--no-deps")
        self.run(args + [requirement], "pip download %s for %s" % (requirement, "any platform" if pure else platform))

    def resolve(self, requirement: str, dest: str) -> None:
        self._download(requirement, dest, self.platforms[0], deps=True)

    def fetch(self, requirement: str, dest: str, platform: Optional[str] = None) -> None:
        self._download(requirement, dest, platform or self.platforms[0], deps=False)

    def fetch_pure(self, requirement: str, dest: str) -> bool:
        try:
            self._download(requirement, dest, "any", deps=False, pure=True)
        except BundleError:
            return False
        return True


def build_own_wheel(source: str, dest: str, pip: Pip) -> Wheel:
    """``pip wheel --no-deps`` on a clean copy of the tree, so nothing is written into the checkout."""
    with tempfile.TemporaryDirectory(prefix="iaccode-agui-src-") as scratch:
        copy = os.path.join(scratch, "src")
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(*SOURCE_IGNORE))
        out = os.path.join(scratch, "wheel")
        pip.run(["wheel", "--no-deps", "-w", out, copy], "building the %s wheel" % PACKAGE)
        built = [name for name in os.listdir(out) if name.endswith(".whl")]
        if len(built) != 1:
            raise BundleError("expected one wheel from pip wheel, got %r" % built)
        target = os.path.join(dest, built[0])
        shutil.move(os.path.join(out, built[0]), target)
    return parse_wheel(target)


def target_environment(python_version: str, platform: str) -> Dict[str, str]:
    """PEP 508 marker values of the target host, which pip's own evaluation ignores."""
    machine = re.sub(r"^(manylinux\d*|musllinux|macosx)(_\d+)*_", "", platform)
    system, sys_platform, os_name = "Linux", "linux", "posix"
    if platform.startswith("macosx"):
        system, sys_platform = "Darwin", "darwin"
    elif platform.startswith("win"):
        system, sys_platform, os_name, machine = "Windows", "win32", "nt", platform.split("_", 1)[-1].upper()
    return {"python_version": python_version, "python_full_version": python_version + ".0",
            "implementation_name": "cpython", "implementation_version": python_version + ".0",
            "platform_python_implementation": "CPython", "platform_system": system, "platform_machine": machine,
            "sys_platform": sys_platform, "os_name": os_name, "platform_release": "", "platform_version": ""}


def requires_dist(wheel: Wheel) -> List[str]:
    with zipfile.ZipFile(wheel.path) as archive:
        name = next(item for item in archive.namelist()
                    if item.count("/") == 1 and item.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))
    return metadata.get_all("Requires-Dist") or []


def needed_closure(root: Wheel, wheels: Dict[str, Wheel], env: Dict[str, str]) -> Tuple[Set[str], List[str]]:
    """Names reachable from ``root`` under the target's markers, and requirements no wheel satisfies yet."""
    from pip._vendor.packaging.requirements import Requirement  # the tool runs pip anyway

    needed: Set[str] = set()
    missing: List[str] = []
    stack: List[Tuple[Wheel, Tuple[str, ...]]] = [(root, ())]
    seen: Set[Tuple[str, Tuple[str, ...]]] = set()
    while stack:
        wheel, extras = stack.pop()
        if (wheel.name, extras) in seen:
            continue
        seen.add((wheel.name, extras))
        needed.add(wheel.name)
        for line in requires_dist(wheel):
            requirement = Requirement(line)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate(dict(env, extra=extra)) for extra in extras + ("",)):
                continue
            name = normalize(requirement.name)
            found = wheels.get(name)
            if found is None or not requirement.specifier.contains(found.version, prereleases=True):
                missing.append("%s%s" % (name, requirement.specifier))
                continue
            stack.append((found, tuple(sorted(requirement.extras))))
    return needed, missing


def collect_wheels(own: Wheel, pip: Pip, work: str) -> List[Wheel]:
    """Resolve, re-check against the target's markers, prefer pure wheels, add the other platforms."""
    resolved = os.path.join(work, "resolved")
    pip.resolve(own.path, resolved)
    env = target_environment(pip.python_version, pip.platforms[0])
    for _ in range(20):
        wheels = {wheel.name: wheel for wheel in map(parse_wheel, _wheel_files(resolved))}
        wheels[own.name] = own
        needed, missing = needed_closure(own, wheels, env)
        if not missing:
            break
        for requirement in missing:
            pip.fetch(requirement, resolved)
    else:
        raise BundleError("dependencies did not settle for Python %s: %s" % (pip.python_version, missing))
    chosen: List[Wheel] = []
    for name in sorted(needed - {own.name}):
        wheel = wheels[name]
        if wheel.pure:
            chosen.append(wheel)
            continue
        pure_dir = os.path.join(work, "pure", name)
        if pip.fetch_pure("%s==%s" % (name, wheel.version), pure_dir):
            chosen.extend(parse_wheel(path) for path in _wheel_files(pure_dir))
            continue
        chosen.append(wheel)
        for platform in pip.platforms[1:]:
            extra_dir = os.path.join(work, "platform", platform)
            before = set(_wheel_files(extra_dir))
            pip.fetch("%s==%s" % (name, wheel.version), extra_dir, platform)
            chosen.extend(parse_wheel(path) for path in sorted(set(_wheel_files(extra_dir)) - before))
    return chosen


def _wheel_files(directory: str) -> List[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, name) for name in os.listdir(directory) if name.endswith(".whl"))


def write_requirements(path: str, own: Wheel, wheels: List[Wheel], python_version: str,
                       platforms: Sequence[str]) -> None:
    by_project: Dict[Tuple[str, str], List[Wheel]] = {}
    for wheel in [own] + wheels:
        by_project.setdefault((wheel.name, wheel.version), []).append(wheel)
    lines = ["# %s %s and its run-time dependencies, pinned for CPython %s on %s." % (
                 PACKAGE, own.version, python_version, ", ".join(platforms)),
             "# Install with: pip install --no-index --find-links wheelhouse --require-hashes -r requirements.txt"]
    for (name, version), group in sorted(by_project.items()):
        hashes = sorted(sha256_of(wheel.path) for wheel in group)
        lines.append("%s==%s \\" % (name, version))
        lines.extend("    --hash=sha256:%s%s" % (digest, " \\" if index < len(hashes) - 1 else "")
                     for index, digest in enumerate(hashes))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def install_commands(python_version: str) -> List[str]:
    """The commands a target host runs inside the bundle (INSTALL.txt and the README show the same ones)."""
    return ["python%s -m venv venv && . venv/bin/activate" % python_version,
            "pip install --no-index --find-links wheelhouse %s" % PACKAGE,
            "python -m %s --demo" % PACKAGE]


def write_install_note(path: str, own: Wheel, wheels: List[Wheel], python_version: str,
                       platforms: Sequence[str]) -> None:
    binary = sorted({(wheel.name, wheel.version) for wheel in wheels if not wheel.pure})
    built = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "%s %s - offline install bundle (built %s)" % (PACKAGE, own.version, built),
        "",
        "Target: CPython %s on:" % python_version,
    ]
    lines += ["  - %s" % describe_platform(platform) for platform in platforms]
    lines += [
        "",
        "Copy this whole directory to the host; no network access is needed from here on.",
        "In this directory (the first command creates and activates a virtual environment for the package):",
        "",
    ]
    lines += ["    " + command for command in install_commands(python_version)]
    lines += [
        "",
        "The last command starts the adapter with its built-in scripted runtime (no LLM, no network) on",
        "http://127.0.0.1:8000/; check it with: curl http://127.0.0.1:8000/health",
        "For real use, point it at a running `iac-code a2a`:",
        "    python -m %s --a2a-url http://127.0.0.1:<port>/ --a2a-token <token>" % PACKAGE,
        "",
        "To check every file against its pinned sha256 while installing:",
        "    pip install --no-index --find-links wheelhouse --require-hashes -r requirements.txt",
        "",
    ]
    if binary:
        lines.append("Binary wheels (compiled code; they install only on the platforms above, for CPython %s):"
                     % python_version)
        lines += ["  - %s %s" % (name, version) for name, version in binary]
        lines.append("Every other wheel is pure Python (py3-none-any) and installs on any platform.")
        lines.append("For another platform or Python version, build another bundle with --platform and "
                     "--python-version.")
    else:
        lines.append("Every wheel is pure Python (py3-none-any): the bundle installs on any platform.")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def build_bundle(out: str, python_version: str, platforms: Sequence[str] = DEFAULT_PLATFORMS,
                 source: str = REPO, force: bool = False, archive: bool = False,
                 python: str = sys.executable) -> Bundle:
    """Build the bundle directory ``out`` (and ``out.tar.gz`` with ``archive``)."""
    if not re.match(r"^\d+\.\d+$", python_version) or \
            tuple(int(part) for part in python_version.split(".")) < MIN_PYTHON:
        raise BundleError("--python-version must be X.Y and at least %d.%d" % MIN_PYTHON)
    if not platforms:
        raise BundleError("at least one --platform is needed")
    out = os.path.abspath(out)
    if os.path.exists(out) and os.listdir(out):
        if not force:
            raise BundleError("%s exists and is not empty (use --force to replace it)" % out)
        shutil.rmtree(out)
    wheelhouse = os.path.join(out, "wheelhouse")
    os.makedirs(wheelhouse)
    pip = Pip(python_version, platforms, python)
    with tempfile.TemporaryDirectory(prefix="iaccode-agui-bundle-") as work:
        own = build_own_wheel(source, wheelhouse, pip)
        wheels = []
        for wheel in collect_wheels(own, pip, work):
            target = os.path.join(wheelhouse, os.path.basename(wheel.path))
            shutil.copyfile(wheel.path, target)
            wheels.append(wheel._replace(path=target))
    write_requirements(os.path.join(out, "requirements.txt"), own, wheels, python_version, platforms)
    write_install_note(os.path.join(out, "INSTALL.txt"), own, wheels, python_version, platforms)
    archive_path = None
    if archive:
        archive_path = out + ".tar.gz"
        with tarfile.open(archive_path, "w:gz") as tar:
            tar.add(out, arcname=os.path.basename(out))
    return Bundle(out, [own] + wheels, python_version, tuple(platforms), tree_size(out), archive_path)


def _own_version(source: str) -> str:
    with open(os.path.join(source, PACKAGE, "version.py"), encoding="utf-8") as handle:
        found = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', handle.read(), re.M)
    return found.group(1) if found else "dev"


def main(argv: Optional[Iterable[str]] = None) -> int:
    current = "%d.%d" % sys.version_info[:2]
    parser = argparse.ArgumentParser(description="Build an offline install bundle (wheelhouse + pins + note).")
    parser.add_argument("--out", help="bundle directory (default dist/%s-<version>-offline-py<X.Y>)" % PACKAGE)
    parser.add_argument("--python-version", default=current,
                        help="CPython X.Y of the target host (default: this interpreter, %s)" % current)
    parser.add_argument("--platform", action="append", dest="platforms",
                        help="wheel platform tag for compiled dependencies; repeat for several "
                             "(default %s)" % DEFAULT_PLATFORMS[0])
    parser.add_argument("--source", default=REPO, help="project checkout to build (default: this one)")
    parser.add_argument("--force", action="store_true", help="replace an existing bundle directory")
    parser.add_argument("--archive", action="store_true", help="also write <out>.tar.gz")
    args = parser.parse_args(list(argv) if argv is not None else None)
    out = args.out or os.path.join(REPO, "dist", "%s-%s-offline-py%s" % (
        PACKAGE, _own_version(args.source), args.python_version))
    try:
        bundle = build_bundle(out, args.python_version, tuple(args.platforms or DEFAULT_PLATFORMS),
                              source=args.source, force=args.force, archive=args.archive)
    except BundleError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    binary = sorted({"%s %s" % (w.name, w.version) for w in bundle.wheels if not w.pure})
    print("bundle: %s (%s, %d wheels; binary: %s)" % (bundle.path, human_size(bundle.size), len(bundle.wheels),
                                                      ", ".join(binary) or "none"))
    if bundle.archive:
        print("archive: %s (%s)" % (bundle.archive, human_size(os.path.getsize(bundle.archive))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
