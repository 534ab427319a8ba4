"""The private internals of Scrapy and pyOpenSSL the crawler reads
(``crawler/_compat.py``, ``crawler/fetch/_openssl.py``) are where the code
expects them; when a release moves one, this fails naming it."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from types import SimpleNamespace

from packaging.specifiers import SpecifierSet

from crawler import _compat
from tests.servers import ROOT


def test_installed_versions_are_the_ones_checked() -> None:
    assert version("scrapy") in SpecifierSet(_compat.SCRAPY), (
        f"Scrapy {version('scrapy')} is outside {_compat.SCRAPY}: check crawler/_compat.py against it, "
        "then widen the range")


_CHECK = """
import inspect
from types import SimpleNamespace
from scrapy.utils.reactor import install_reactor
install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.core.engine import ExecutionEngine, _Slot
from scrapy.core.scraper import Scraper, Slot
from crawler import _compat

woken = []
engine = SimpleNamespace(
    _slot=_Slot(close_if_idle=False, nextcall=SimpleNamespace(schedule=lambda: woken.append(1)), scheduler=None),
    scraper=SimpleNamespace(slot=Slot()))
gone = _compat.missing(engine)
if "self._slot" not in inspect.getsource(ExecutionEngine.__init__):
    gone.append("ExecutionEngine._slot")
if "self.slot" not in inspect.getsource(Scraper):
    gone.append("Scraper.slot")
downloading, scraping = Request("http://x.test/1"), Request("http://x.test/2")
engine._slot.add_request(downloading)
engine.scraper.slot.add_response_request(HtmlResponse("http://x.test/2", body=b""), scraping)
assert _compat.engine_busy(engine) == {id(downloading), id(scraping)}, "engine_busy"
assert _compat.wake_engine(engine) is True and woken == [1], "wake_engine"
from scrapy.core.downloader import Downloader
from scrapy.utils.test import get_crawler
downloader = Downloader(get_crawler(settings_dict={"CONCURRENT_REQUESTS": 4}))
loaded = SimpleNamespace(downloader=downloader)
assert _compat.downloader_load(loaded) == (0, 4), "downloader_load"
downloader.active.update({Request("http://x.test/a"), Request("http://x.test/b")})
assert _compat.set_downloader_cap(loaded, 2) and downloader.needs_backout(), "set_downloader_cap"
assert _compat.set_downloader_cap(loaded, 3) and not downloader.needs_backout(), "set_downloader_cap"
print("MOVED:", ", ".join(gone) if gone else "nothing")
"""


def test_nothing_private_has_moved() -> None:
    """Scrapy's own slot classes, put where a running engine keeps them (in a
    process of its own: Scrapy's slots need an installed reactor)."""
    done = subprocess.run([sys.executable, "-c", _CHECK], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MOVED: nothing" in done.stdout, f"{done.stdout.strip()}: see crawler/_compat.py"


def test_a_moved_internal_is_named_not_raised() -> None:
    moved = SimpleNamespace(_slot=SimpleNamespace(), scraper=SimpleNamespace(slot=None))
    assert _compat.engine_busy(moved) is None
    assert _compat.wake_engine(moved) is False
    assert _compat.wake_engine(SimpleNamespace(_slot=None)) is None  # not running: nothing to say
    assert _compat.downloader_load(moved) is None and _compat.set_downloader_cap(moved, 5) is False
    gone = _compat.missing(moved)
    assert "ExecutionEngine._slot.inprogress" in gone and "Scraper.slot.active" in gone


def test_every_private_name_is_listed_with_its_range() -> None:
    """``_compat.private_names()`` names every package whose private surface
    the crawler reads, each with a range holding the installed version; and
    no module outside the three that read such a surface imports a private
    name of another package (an import the list would not know of)."""
    import ast

    listed = _compat.private_names()
    assert set(listed) == {"scrapy", "pyOpenSSL", "protego"}
    for package, (ranges, names) in listed.items():
        assert names, package
        for dist, spec in ranges.items():
            assert version(dist) in SpecifierSet(spec), f"{dist} {version(dist)} outside {spec}"
    flat = {name for _, names in listed.values() for name in names}
    readers = {"crawler/_compat.py", "crawler/fetch/_openssl.py", "crawler/robots/_protego.py"}
    strays = []
    for path in sorted((ROOT / "crawler").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] == "crawler":
                continue
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if any(part.startswith("_") and not part.startswith("__") for part in dotted.split(".")):
                    if rel not in readers:
                        strays.append(f"{rel}: {dotted}")
                    elif not any(name == dotted or name.startswith(dotted + ".") or dotted.endswith(name)
                                 for name in flat):
                        strays.append(f"{rel}: {dotted} (not in private_names())")
    assert not strays, strays
