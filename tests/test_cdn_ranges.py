"""The CDN vendors' published ranges (crawler/cdn_ranges.py): the shipped
copy, the lookup, ``billion``'s default, an edge address made a shared front
end at its first lookup on a real Redis, and ``scrapy cdn-ranges`` against a
real HTTP server on 127.0.0.1 serving lists in the vendors' layouts."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import random
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.cdn_ranges import BUILTIN, SOURCES, Ranges, RangesError, load, networks_of, parse
from crawler.clock import ManualClock
from crawler.fetch._address import Addresses
from crawler.settings_registry import BY_NAME, SettingsError, validate
from crawler.spiders.billion import SHARED_PACE, BillionSpider
from crawler.store import AddressPoliteness, Frontier, Keys, Lookup, Politeness
from tests.servers import ROOT

# --- the lookup ------------------------------------------------------------


def test_the_lookup_agrees_with_ipaddress_on_every_edge() -> None:
    rnd = random.Random(50)
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for _ in range(300):  # overlapping and adjacent networks of both families
        nets.append(ipaddress.IPv4Network((rnd.getrandbits(32) >> 20 << 20, rnd.randint(12, 28)), strict=False))
        nets.append(ipaddress.IPv6Network((rnd.getrandbits(128) >> 96 << 96, rnd.randint(24, 64)), strict=False))
    ranges = Ranges(nets)
    probes: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for n in nets:
        first, last = int(n.network_address), int(n.broadcast_address)
        kind = ipaddress.IPv4Address if n.version == 4 else ipaddress.IPv6Address
        top = 2 ** n.max_prefixlen - 1
        probes += [kind(v) for v in (first - 1, first, last, last + 1) if 0 <= v <= top]
    probes += [ipaddress.IPv4Address(rnd.getrandbits(32)) for _ in range(2000)]
    probes += [ipaddress.IPv6Address(rnd.getrandbits(128)) for _ in range(2000)]
    wrong = [a for a in probes if (a in ranges) != any(a in n for n in nets)]
    assert not wrong
    assert "104.16.0.1" in Ranges(["104.16.0.0/13"]) and "104.24.0.1" not in Ranges(["104.16.0.0/13"])
    assert "::ffff:104.16.0.1" not in Ranges(["104.16.0.0/13"])  # families kept apart
    assert len(Ranges(["10.0.0.0/25", "10.0.0.128/25", "10.0.0.7/32"])) == 1  # merged


# --- the shipped copy --------------------------------------------------------


def test_the_shipped_copy_is_dated_and_says_where_each_range_comes_from() -> None:
    data = load(BUILTIN)
    dt.date.fromisoformat(data["date"])
    assert data["vendors"], "no vendor"
    for vendor, entry in data["vendors"].items():
        assert entry["ranges"], vendor
        assert entry["sources"] and all(u.startswith("https://") for u in entry["sources"]), vendor
        assert entry["taken_from"] and entry["published"], vendor
        dt.date.fromisoformat(entry["published"])
        # the command refreshes every shipped vendor from its own published list
        assert set(entry["sources"]) <= {s.url for s in SOURCES}, vendor
    assert "104.16.0.0/13" in data["vendors"]["cloudflare"]["ranges"]
    ranges = Ranges(networks_of(data))
    assert "104.21.48.1" in ranges and "2606:4700::6810:1" in ranges
    assert "93.184.215.14" not in ranges and "8.8.8.8" not in ranges
    # in the wheel and the sdist (tests/test_packaging.py builds them)
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.json" in package_data["crawler"]


def test_billion_ships_the_ranges_and_the_addon_adds_none() -> None:
    assert BY_NAME["CRAWLER_IP_SHARED_RANGES"].default == ""
    custom = BillionSpider.custom_settings
    assert custom["CRAWLER_IP_SHARED_RANGES"] == "builtin"
    settings = Settings()
    BillionSpider.update_settings(settings)
    pace = {name: settings[name] for name in SHARED_PACE}
    # the model (docs/politeness.md): 2,000 domains on one edge at their own 70 s
    interval = custom["CRAWLER_DOMAIN_DELAY"] + 0.5
    assert pace["CRAWLER_IP_SHARED_DELAY"] * BY_NAME["CRAWLER_IP_SHARED_MIN_DOMAINS"].default <= interval
    # enough in flight for that pace with answers of up to a second
    assert pace["CRAWLER_IP_SHARED_CONCURRENCY"] >= 1.0 / pace["CRAWLER_IP_SHARED_DELAY"]
    # a project's own pace wins (the test web's project runs its one address at none)
    project = Settings({"CRAWLER_IP_SHARED_DELAY": 0.0}, priority="project")
    BillionSpider.update_settings(project)
    assert project["CRAWLER_IP_SHARED_DELAY"] == 0.0 and project["CRAWLER_IP_SHARED_CONCURRENCY"] == 32


def test_a_ranges_file_that_does_not_read_is_refused_at_start(tmp_path: Path) -> None:
    validate(Settings({"CRAWLER_IP_SHARED_RANGES": "builtin"}), unknown=False)
    bad = tmp_path / "ranges.json"
    bad.write_text(json.dumps({"format": 1, "vendors": {"x": {"ranges": ["104.16.0.0/33"]}}}))
    for value in (str(bad), str(tmp_path / "missing.json")):
        with pytest.raises(SettingsError, match="CRAWLER_IP_SHARED_RANGES"):
            validate(Settings({"CRAWLER_IP_SHARED_RANGES": value}), unknown=False)


def test_the_vendors_layouts_are_parsed() -> None:
    assert parse("lines", b"173.245.48.0/20\n103.21.244.0/22\n\n") == ["173.245.48.0/20", "103.21.244.0/22"]
    fastly = {"addresses": ["151.101.0.0/16"], "ipv6_addresses": ["2a04:4e42::/32"]}
    assert parse("fastly", json.dumps(fastly).encode()) == ["151.101.0.0/16", "2a04:4e42::/32"]
    cloudfront = {"CLOUDFRONT_GLOBAL_IP_LIST": ["13.32.0.0/15"], "CLOUDFRONT_REGIONAL_EDGE_IP_LIST": ["13.113.196.64/26"]}
    assert parse("cloudfront", json.dumps(cloudfront).encode()) == ["13.32.0.0/15"]  # the edges only
    for layout, body in (("lines", b"<html>Not found</html>"), ("fastly", b"{}"), ("cloudfront", b"[1]"),
                         ("fastly", b"not json")):
        with pytest.raises(RangesError):
            parse(layout, body)


# --- on a real Redis ---------------------------------------------------------


def _lookup(settings: dict[str, object], host: str) -> Lookup:
    crawler = get_crawler(settings_dict={"CRAWLER_BLOCK_PRIVATE": False, **settings})
    addresses = Addresses(crawler.settings, crawler.stats)
    try:
        answer = asyncio.run(addresses.answer(host))
    finally:
        addresses.executor.shutdown()
    return Lookup(host, host, answer.status, answer.addresses, answer.shared)


def test_an_edge_address_is_a_shared_front_end_from_its_first_lookup(redis_client: redis.Redis,
                                                                        clock: ManualClock) -> None:
    host_map = {"cdn.test": ["104.16.132.229", "192.0.2.9"], "plain.test": "192.0.2.10"}

    def frontier(spider: str) -> Frontier:
        f = Frontier(redis_client, Keys("crawler", spider, 0), politeness=Politeness(delay=70.0),
                     addresses=AddressPoliteness(delay=1.0, shared_min=2000, shared_delay=0.035, shared_cap=32),
                     clock=clock)  # type: ignore[arg-type]
        f.open()
        return f

    billion = {"CRAWLER_HOST_MAP": host_map, "CRAWLER_IP_SHARED_RANGES": "builtin"}
    flips = frontier("billion").answer([_lookup(billion, "cdn.test"), _lookup(billion, "plain.test")])
    assert [(a, why) for a, why, _ in flips] == [("104.16.132.229", "range")]
    # without the ranges (the addon's default) the same edge waits for 2,000 domains
    assert frontier("other").answer([_lookup({"CRAWLER_HOST_MAP": host_map}, "cdn.test")]) == []


# --- scrapy cdn-ranges against a real HTTP server ----------------------------


class _Lists(BaseHTTPRequestHandler):
    served: dict[str, tuple[int, bytes]] = {}
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.asked.append(self.path)
        status, body = self.served.get(self.path, (404, b"no such list"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


CLOUDFLARE_V4 = b"173.245.48.0/20\n103.21.244.0/22\n104.16.0.0/13\n104.24.0.0/14\n198.51.100.0/24\n"
CLOUDFLARE_V6 = b"2400:cb00::/32\n2606:4700::/32\n"
FASTLY = json.dumps({"addresses": ["151.101.0.0/16", "199.232.0.0/16"],
                     "ipv6_addresses": ["2a04:4e42::/32"]}).encode()
CLOUDFRONT = json.dumps({"CLOUDFRONT_GLOBAL_IP_LIST": ["13.32.0.0/15", "205.251.249.0/24"],
                         "CLOUDFRONT_REGIONAL_EDGE_IP_LIST": ["13.113.196.64/26"]}).encode()


@pytest.fixture
def lists() -> Iterator[tuple[str, type[_Lists]]]:
    handler = type("Lists", (_Lists,), {"asked": [], "served": {
        "/www.cloudflare.com/ips-v4": (200, CLOUDFLARE_V4),
        "/www.cloudflare.com/ips-v6": (200, CLOUDFLARE_V6),
        "/api.fastly.com/public-ip-list": (200, FASTLY),
        "/d7uri8nf7uskq.cloudfront.net/tools/list-cloudfront-ips": (200, CLOUDFRONT),
    }})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _command(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", "cdn-ranges", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_command_refreshes_the_file_from_the_vendors_lists(tmp_path: Path,
                                                               lists: tuple[str, type[_Lists]]) -> None:
    base, handler = lists
    output = tmp_path / "cdn_ranges.json"
    old = load(BUILTIN)
    old["vendors"]["example"] = {"sources": [], "taken_from": "by hand", "published": "2026-01-01",
                                 "ranges": ["192.0.2.0/24"]}
    output.write_text(json.dumps(old))
    done = _command(tmp_path, "--mirror", base, "--output", str(output))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(handler.asked) == sorted(f"/{s.url.split('://', 1)[1]}" for s in SOURCES)
    new = load(output)
    assert new["date"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
    vendors = new["vendors"]
    assert vendors["fastly"]["ranges"] == ["151.101.0.0/16", "199.232.0.0/16", "2a04:4e42::/32"]
    assert vendors["cloudfront"]["ranges"] == ["13.32.0.0/15", "205.251.249.0/24"]  # no regional caches
    assert vendors["fastly"]["sources"] == ["https://api.fastly.com/public-ip-list"]
    assert vendors["example"]["ranges"] == ["192.0.2.0/24"]  # a vendor no source covers is kept
    assert "198.51.100.0/24" in vendors["cloudflare"]["ranges"]
    lines = done.stdout.splitlines()
    assert lines[0] == f"cdn-ranges: wrote {output} (dated {new['date']})"
    cloudflare = next(line for line in lines if line.strip().startswith("cloudflare:"))
    assert cloudflare.strip() == ("cloudflare: 7 ranges, +1 -16; + 198.51.100.0/24; - 103.22.200.0/22, 103.31.4.0/22, "
                                  "108.162.192.0/18, 131.0.72.0/22, 141.101.64.0/18, 162.158.0.0/15, 172.64.0.0/13, "
                                  "188.114.96.0/20 and 8 more")
    assert any(line.strip() == "fastly: 3 ranges (new)" for line in lines)
    assert "104.16.1.1" in Ranges(networks_of(new)) and "151.101.1.1" in Ranges(networks_of(new))
    again = _command(tmp_path, "--mirror", base, "--output", str(output))
    assert "cloudflare: 7 ranges, unchanged" in again.stdout, again.stdout


def test_offline_or_a_failed_list_keeps_the_copy_and_says_so_in_one_line(tmp_path: Path,
                                                                         lists: tuple[str, type[_Lists]]) -> None:
    base, handler = lists
    output = tmp_path / "cdn_ranges.json"
    output.write_bytes(BUILTIN.read_bytes())
    before = output.read_bytes()
    offline = _command(tmp_path, "--offline", "--mirror", base, "--output", str(output))
    assert offline.returncode == 0
    assert offline.stdout.splitlines() == [f"cdn-ranges: offline: kept {output} (dated {load(BUILTIN)['date']})"]
    assert handler.asked == [] and output.read_bytes() == before
    del handler.served["/api.fastly.com/public-ip-list"]  # one vendor's list is gone: nothing is written
    failed = _command(tmp_path, "--mirror", base, "--output", str(output))
    assert failed.returncode == 1
    assert failed.stdout.splitlines() == [
        f"cdn-ranges: could not fetch {base}/api.fastly.com/public-ip-list (HTTP 404): "
        f"kept {output} (dated {load(BUILTIN)['date']})"]
    assert output.read_bytes() == before
    # no network at all: the port refuses, the shipped copy stays in use
    unwritten = tmp_path / "new.json"
    refused = _command(tmp_path, "--mirror", "http://127.0.0.1:9", "--timeout", "5", "--output", str(unwritten))
    assert refused.returncode == 1 and len(refused.stdout.splitlines()) == 1
    assert f"kept {BUILTIN}" in refused.stdout and not unwritten.exists()
