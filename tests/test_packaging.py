"""The package one could publish: the sdist and wheel build (``python -m
build``) and pass ``twine check``, carry the license, ``py.typed`` and the
one version; the dependency ranges in pyproject.toml agree with the two pin
files that test their ends (requirements.txt: the upper end, `make test`;
requirements-min.txt: the lower end, scripts/lower-bounds) and with the
ranges the modules reading private internals were checked against; and the
runtime never imports a test-only package."""

from __future__ import annotations

import ast
import email
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

import crawler
from crawler import _compat
from crawler.robots import _protego
from tests.servers import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: used by the tests, the devkit or the benchmarks only: never by crawler/
TEST_ONLY = {"trustme", "warcio", "fastwarc", "pytest", "hypothesis", "scrapyd", "scrapyd_client", "devkit", "tests",
             "bench"}


def pins(path: Path) -> dict[str, Version]:
    """``name -> version`` of the ``name==version`` lines of a requirements
    file (``-r`` lines and comments skipped)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: {line!r} is not an exact pin"
        found[canonicalize_name(req.name)] = Version(spec.version)
    return found


def ranges() -> dict[str, SpecifierSet]:
    return {canonicalize_name(r.name): r.specifier
            for r in map(Requirement, PYPROJECT["project"]["dependencies"])}


def lower(spec: SpecifierSet) -> Version:
    (low,) = [Version(s.version) for s in spec if s.operator == ">="]
    return low


def upper(spec: SpecifierSet) -> Version | None:
    found = [Version(s.version) for s in spec if s.operator == "<"]
    return found[0] if found else None


def test_both_ends_of_every_range_are_pinned() -> None:
    deps, top, bottom = ranges(), pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-min.txt")
    for name, spec in deps.items():
        assert name in top and name in bottom, f"{name}: pinned in requirements.txt and requirements-min.txt"
        assert bottom[name] == lower(spec), f"{name}: requirements-min.txt pins {bottom[name]}, the range is {spec}"
        assert top[name] in spec, f"{name}: requirements.txt pins {top[name]}, outside {spec}"
    # the extras' ends too
    extras = {canonicalize_name(r.name): r.specifier
              for group in PYPROJECT["project"]["optional-dependencies"].values() for r in map(Requirement, group)}
    dev = {**pins(ROOT / "requirements-dev.txt"), **pins(ROOT / "requirements-test.txt"),
           **pins(ROOT / "requirements-docs.txt"), **top}
    for name, spec in extras.items():
        assert dev[name] in spec, f"extra {name}: the dev pin {dev[name]} is outside {spec}"
        if name in bottom:
            assert bottom[name] == lower(spec), f"extra {name}: requirements-min.txt pins {bottom[name]}, not {spec}"


def test_ranges_stay_within_what_the_private_reads_were_checked_on() -> None:
    """A range may start later than a module's checked range (another part
    needs a newer release) but must end where that module's does."""
    deps = ranges()
    checked = {"scrapy": SpecifierSet(_compat.SCRAPY), "protego": SpecifierSet(_protego.PROTEGO)}
    openssl = (ROOT / "crawler" / "fetch" / "_openssl.py").read_text()  # importing it needs the bindings only
    known = ast.literal_eval(re.search(r"^KNOWN = (\{.*\})$", openssl, re.MULTILINE).group(1))  # type: ignore[union-attr]
    checked.update({canonicalize_name(k): SpecifierSet(v) for k, v in known.items()})
    for name, spec in checked.items():
        assert upper(deps[name]) == upper(spec), f"{name}: pyproject says {deps[name]}, the module {spec}"
        assert lower(deps[name]) >= lower(spec), f"{name}: pyproject says {deps[name]}, the module {spec}"


def test_the_runtime_imports_no_test_only_package() -> None:
    runtime = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert not {canonicalize_name(n) for n in TEST_ONLY} & runtime
    for path in (ROOT / "crawler").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                assert name.split(".")[0] not in TEST_ONLY, f"{path.relative_to(ROOT)} imports {name}"


def test_one_version() -> None:
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "crawler.__version__"}
    assert re.search(rf"^## {re.escape(crawler.__version__)}\b", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)


def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    version = crawler.__version__
    wheel = out / f"polite_crawler-{version}-py3-none-any.whl"
    sdist = out / f"polite_crawler-{version}.tar.gz"
    assert sorted(p.name for p in out.iterdir()) == sorted([wheel.name, sdist.name])
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0 and check.stdout.count("PASSED") == 2, check.stdout + check.stderr

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"polite_crawler-{version}.dist-info"
        meta = email.message_from_bytes(zf.read(f"{info}/METADATA"))
    assert {"crawler/py.typed", "crawler/settings_registry.toml", "crawler/lua/dequeue.lua",
            "crawler/data/cdn_ranges.json",
            f"{info}/licenses/LICENSE", f"{info}/entry_points.txt"} <= names
    assert not any(n.startswith(("tests/", "devkit/", "bench/")) for n in names)
    assert meta["Version"] == version and meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert "Framework :: Scrapy" in meta.get_all("Classifier")
    # the test-only packages are extras, not requirements
    for line in meta.get_all("Requires-Dist"):
        if Requirement(line).name.lower() in {"trustme", "warcio", "fastwarc"}:
            assert "extra ==" in line, line
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {"LICENSE", "CHANGELOG.md", "pyproject.toml", "setup.py", "crawler/py.typed"} <= members


def test_every_package_is_listed() -> None:
    """pyproject.toml lists the packages (crawler.lua is the lua/ folder): a
    new package left out would be missing from the wheel and the egg."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "crawler").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
