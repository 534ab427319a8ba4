"""Revisits over HTTP (design/recrawl.md C.3, C.4, C.6; contract E): the
``V`` entry decoded into a request with its history, ``RecrawlMiddleware``
sending the validators the record and the host's trust allow (none on a
verification), the 304 routed to no callback unless the request allows it,
``RECRAWL_SEEN`` filled, and the WARC writer's revisit records.

The crawls are real ``scrapy`` crawls in a child process (a plain
``CrawlerProcess``: Scrapy's own scheduler, the crawler's download handler,
this middleware and the WARC extension) against the test web with
validators on; the server's log says which conditionals it received.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import subprocess
import sys
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
import scrapy
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler
from warcio.archiveiterator import ArchiveIterator

from crawler.meta import RECRAWL_SEEN, RECRAWL_STATE
from crawler.middlewares.recrawl import text_key
from crawler.recrawl.record import History, Refers, pack, unpack
from crawler.store import codec
from devkit.testweb.control import TestWebProcess

ROOT = Path(__file__).resolve().parent.parent
VERIFY_EVERY = 20
RID = bytes(range(16))
RDATE = 1_796_000_000_123_456  # µs


class _Spider(scrapy.Spider):
    name = "codec"

    def parse(self, response):  # pragma: no cover - never called
        return None

    def other(self, response):  # pragma: no cover - never called
        return None


def spider() -> _Spider:
    return _Spider.from_crawler(get_crawler(_Spider))


def record(entry: bytes, **fields: Any) -> bytes:
    return pack(History(entry=entry, **fields))


def test_the_end_of_a_304_is_the_ledgers_not_modified() -> None:
    from crawler.middlewares.recrawl import END_NOT_MODIFIED
    from crawler.store.ledger import NOT_MODIFIED, STORED_ENDS

    assert END_NOT_MODIFIED == NOT_MODIFIED and NOT_MODIFIED in STORED_ENDS


# --- the V entry ----------------------------------------------------------------

def test_a_v_entry_decodes_to_its_inner_request_with_the_history() -> None:
    s = spider()
    history = record(b"U3 https://a.test/p?q=1", etag=b'W/"x"', weak=True, lm=1_700_000_000, n=4,
                     refers=Refers(b"abcdef", RDATE, RID))
    request = codec.decode(codec.encode_revisit("123456789", 5, 0.25, history), s)
    assert request.url == "https://a.test/p?q=1" and request.meta["depth"] == 3
    assert request.meta[RECRAWL_STATE] == {"k": "123456789", "record": history, "trust": 5, "mu": 0.25}
    inner = scrapy.Request("https://a.test/r", callback=s.other, meta={"x": [1, 2]}, priority=7)
    history = record(codec.encode(inner, s))
    # the record may hold colons of its own: only the first three separate the fields
    entry = b"V42:0::" + history
    request = codec.decode(entry, s)
    assert (request.url, request.callback, request.priority, request.meta["x"]) == (inner.url, s.other, 7, [1, 2])
    assert request.meta[RECRAWL_STATE] == {"k": "42", "record": history, "trust": 0, "mu": None}
    assert unpack(request.meta[RECRAWL_STATE]["record"]).entry == history[-len(unpack(history).entry):]


def test_a_retried_revisit_travels_as_r_and_keeps_its_state() -> None:
    s = spider()
    history = record(b"U0 https://a.test/", etag=b'"e"', lm=1_700_000_000, chg=b"\x00\xff" * 3,
                     refers=Refers(b"\x00:\xff:ab", RDATE, RID))
    request = codec.decode(codec.encode_revisit("7", 2, None, history), s)
    request.meta[RECRAWL_STATE]["sent"] = "m"
    request.meta[RECRAWL_SEEN] = {"status": 503, "etag": b"", "chg": None}
    entry = codec.encode(request, s)
    assert entry[:1] == b"R"
    again = codec.decode(entry, s)
    assert again.url == "https://a.test/"
    assert again.meta[RECRAWL_STATE] == {"k": "7", "record": history, "trust": 2, "mu": None, "sent": "m"}
    assert type(again.meta[RECRAWL_STATE]["record"]) is bytes
    assert RECRAWL_SEEN not in again.meta  # the last answer is this attempt's, not the next one's
    assert unpack(again.meta[RECRAWL_STATE]["record"]).refers == Refers(b"\x00:\xff:ab", RDATE, RID)


GOOD = record(b"U0 https://a.test/")


@pytest.mark.parametrize("entry", [
    b"V", b"V1", b"V1:0", b"V1:0:", b"Vx:0::" + GOOD, b"V1:x::" + GOOD, b"V-1:0::" + GOOD, b"V1:0:abc:" + GOOD,
    b"V1:0:nan:" + GOOD, b"V1:0::", b"V1:0::" + GOOD[:20], b"V1:0::" + b"\x80" + GOOD[1:],
    b"V1:0::" + GOOD[:-len(b"U0 https://a.test/")] + b"X0 https://a.test/",
    b"V1:0::" + GOOD[:-len(b"U0 https://a.test/")] + b"V1:0::" + GOOD,
])
def test_a_malformed_v_entry_is_one_value_error(entry: bytes) -> None:
    with pytest.raises(ValueError) as caught:
        codec.decode(entry, spider())
    message = str(caught.value)
    assert "\n" not in message and message.startswith("malformed revisit entry"), message


# --- crawls -----------------------------------------------------------------

_CRAWL = r"""
import json, sys
from scrapy import Spider, signals
from scrapy.crawler import CrawlerProcess
from crawler.store import codec

config = json.loads(sys.argv[1])
out = {"called": {}, "errback": [], "metas": {}}


def plain(value):
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


if config.get("billion"):
    from crawler.spiders.billion import BillionSpider as Base
else:
    Base = Spider


class Revisits(Base):
    name = "revisits"
    if config.get("billion"):  # billion's rules, less its WARC folder and its private-address refusal
        custom_settings = {**Base.custom_settings, "CRAWLER_WARC_DIR": "", "CRAWLER_BLOCK_PRIVATE": False,
                           "CONCURRENT_REQUESTS": 8, "CRAWLER_MAX_DEPTH": 1, "CRAWLER_SITEMAPS": False}
    else:
        recrawl_signature = config.get("recrawl_signature", False)

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.received, signals.response_received)
        return spider

    async def start(self):
        for case in config["cases"]:
            request = codec.decode(bytes.fromhex(case["entry"]), self)
            request = request.replace(dont_filter=True, errback=self.failed)
            request.meta["case"] = case["name"]
            request.meta.update(case.get("meta", {}))
            for name, value in case.get("headers", {}).items():
                request.headers[name] = value
            yield request

    def received(self, response, request, spider):
        out["metas"][request.meta["case"]] = request.meta  # read once the crawl is over

    def parse(self, response):
        out["called"][response.meta["case"]] = {"status": response.status,
                                                "not_modified": response.meta.get("crawler_not_modified")}
        if config.get("billion"):  # its links beyond its depth: no frontier needed
            response.meta["depth"] = 5
            yield from super().parse(response)

    def failed(self, failure):
        out["errback"].append(failure.request.meta["case"])


process = CrawlerProcess({
    "DOWNLOAD_HANDLERS": {"http": "crawler.fetch.DownloadHandler", "https": "crawler.fetch.DownloadHandler"},
    "TWISTED_DNS_RESOLVER": "crawler.resolver.HostMapResolver",
    "CRAWLER_HOST_MAP": {"*.test": "127.0.0.1"}, "CRAWLER_ALLOW_PRIVATE": ["*.test"],
    "DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.recrawl.RecrawlMiddleware": 585},
    "EXTENSIONS": {"crawler.extensions.warc.WarcExtension": 520},
    "DOWNLOAD_TIMEOUT": 20, "RETRY_ENABLED": False, "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "INFO",
    "ROBOTSTXT_OBEY": False, "COOKIES_ENABLED": False,
    **config["settings"],
})
crawler = process.create_crawler(Revisits)
process.crawl(crawler)
process.start()
out["metas"] = {name: {k: plain(v) for k, v in meta.items() if k.startswith(("_crawler", "crawler", "handle"))}
                for name, meta in out["metas"].items()}
out["stats"] = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
print(json.dumps(out))
"""


def crawl(cases: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    config = {"cases": cases, "recrawl_signature": settings.pop("recrawl_signature", False),
              "billion": settings.pop("billion", False), "settings": settings}
    result = subprocess.run([sys.executable, "-c", _CRAWL, json.dumps(config)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False, env=_env())
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.splitlines()[-1])
    out["log"] = result.stderr
    return out


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return env


def fetch(web: TestWebProcess, k: int) -> tuple[dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.request("GET", f"/p/{k}.html", headers={"Host": f"{web.config.domain(0)}:{web.port}"})
        resp = conn.getresponse()
        assert resp.status == 200
        return dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def unhex(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    if isinstance(value, dict):
        return {k: unhex(v) for k, v in value.items()}
    return value


class Page:
    """One page of the test web as a first visit saw it, and the history that visit left."""

    def __init__(self, web: TestWebProcess, k: int) -> None:
        self.k = k
        self.url = web.url(0, f"/p/{k}.html")
        self.headers, self.body = fetch(web, k)
        again = fetch(web, k)[1]
        self.noisy = again != self.body
        self.etag = self.headers["ETag"].encode()
        self.lm = int(parsedate_to_datetime(self.headers["Last-Modified"]).timestamp())

    def entry(self, key: int, *, n: int = 3, trust: int = 0, wd: bytes = b"wdwdwd", warc: bool = True) -> str:
        history = record(b"U0 " + self.url.encode(), etag=self.etag, weak=self.etag.startswith(b"W/"), lm=self.lm,
                         n=n, length=len(self.body), refers=Refers(wd, RDATE, RID) if warc else None)
        return codec.encode_revisit(str(key), trust, None, history).hex()

    def plain(self) -> str:
        return codec.encode_url(self.url).hex()


NOT_VERIFY = 21  # (21 + 3) % 20 != 0
VERIFY = 17  # (17 + 3) % 20 == 0


@pytest.fixture
def site(make_web) -> tuple[TestWebProcess, list[Page]]:
    web = make_web(domains=1, pages=24, size_fixed=3000, validators={"both": 1}, noisy_share=0.4)
    pages = [Page(web, k) for k in range(1, 24)]
    return web, pages


def test_validators_304_routing_seen_and_revisit_records(site, tmp_path: Path) -> None:
    web, pages = site
    quiet = [p for p in pages if not p.noisy]
    noisy = [p for p in pages if p.noisy]
    assert len(quiet) >= 8 and len(noisy) >= 1
    cond, allowed, trust1, trust2, trust4, verify, fresh = quiet[:7]
    cases = [
        {"name": "cond", "entry": cond.entry(NOT_VERIFY)},
        {"name": "allowed", "entry": allowed.entry(NOT_VERIFY), "meta": {"handle_httpstatus_list": [304]}},
        {"name": "trust1", "entry": trust1.entry(NOT_VERIFY, trust=1)},
        {"name": "trust2", "entry": trust2.entry(NOT_VERIFY, trust=2, warc=False)},
        {"name": "trust4", "entry": trust4.entry(NOT_VERIFY, trust=4)},
        # a verification; the stored capture's payload is this one's: an identical-payload revisit
        {"name": "verify", "entry": verify.entry(VERIFY, wd=hashlib.sha1(verify.body).digest()[:6])},
        {"name": "fresh", "entry": fresh.plain()},
        {"name": "noisy1", "entry": noisy[0].plain()},
        {"name": "noisy2", "entry": noisy[0].plain()},
        {"name": "untracked", "entry": fresh.plain(), "meta": {"crawler_recrawl": False}},
        # the spider's own validators on a request that is no revisit: Scrapy's as before
        {"name": "own", "entry": quiet[7].plain(), "headers": {"If-None-Match": quiet[7].etag.decode()}},
    ]
    warc = tmp_path / "warc"
    out = crawl(cases, CRAWLER_RECRAWL="fixed", CRAWLER_RECRAWL_VERIFY_EVERY=VERIFY_EVERY,
                CRAWLER_WARC_DIR=str(warc), CRAWLER_WARC_THREAD="true")

    # the validators the server received (its log), as the record and the trust say
    received = {}
    for e in web.log():
        received.setdefault(e.path, []).append((e.status, e.conditionals))
    assert received[f"/p/{cond.k}.html"][-1] == (304, "nm")
    assert received[f"/p/{allowed.k}.html"][-1] == (304, "nm")
    assert received[f"/p/{trust1.k}.html"][-1] == (304, "m")  # no If-None-Match
    assert received[f"/p/{trust2.k}.html"][-1] == (304, "n")  # no If-Modified-Since
    assert received[f"/p/{trust4.k}.html"][-1] == (200, "-")  # none
    assert received[f"/p/{verify.k}.html"][-1] == (200, "-")  # a verification: none
    assert received[f"/p/{fresh.k}.html"][-2:] == [(200, "-"), (200, "-")]
    assert received[f"/p/{quiet[7].k}.html"][-1] == (304, "n")

    # a 304 reaches neither the callback nor the errback, unless the request allows it
    metas = {name: unhex(meta) for name, meta in out["metas"].items()}
    assert out["errback"] == ["own"]  # HttpError, as without the middleware
    assert "crawler_end" not in unhex(out["metas"]["own"])
    assert set(out["called"]) == {"allowed", "trust4", "verify", "fresh", "noisy1", "noisy2", "untracked"}
    assert out["called"]["allowed"] == {"status": 304, "not_modified": True}
    assert out["called"]["verify"] == {"status": 200, "not_modified": None}
    assert "Ignoring response" not in out["log"]
    assert "httperror/response_ignored_count" not in out["stats"]
    for name in ("cond", "allowed", "trust1", "trust2"):
        meta = metas[name]
        assert meta["crawler_end"] == "n" and meta["crawler_not_modified"] is True, name
        assert meta[RECRAWL_SEEN]["status"] == 304 and meta[RECRAWL_SEEN]["chg"] is None
    assert metas["cond"]["handle_httpstatus_list"] == [304]  # the copy's own
    for name in ("trust4", "verify", "fresh"):
        assert "crawler_end" not in metas[name] and "crawler_not_modified" not in metas[name]

    # what each answer showed
    seen = {name: meta.get(RECRAWL_SEEN) for name, meta in metas.items()}
    assert {name: s["sent"] for name, s in seen.items() if s} == {
        "cond": "em", "allowed": "em", "trust1": "m", "trust2": "e", "trust4": "", "verify": "", "fresh": "",
        "noisy1": "", "noisy2": "", "own": ""}
    assert seen["untracked"] is None
    v = seen["verify"]
    assert (v["status"], v["etag"], v["weak"], v["lm"], v["length"]) == (200, verify.etag, False, verify.lm, len(verify.body))
    assert v["chg"] == hashlib.sha1(verify.body).digest()[:6]
    assert abs(v["date"] - parsedate_to_datetime(verify.headers["Date"]).timestamp()) < 86_400
    assert seen["cond"]["etag"] == cond.etag and seen["cond"]["length"] == 0
    assert seen["noisy1"]["chg"] != seen["noisy2"]["chg"]  # the digest sees the token

    # the WARC: a 304 is a server-not-modified revisit naming the stored capture, the
    # verification's unchanged payload an identical-payload revisit, a new page a response
    records = {}
    for path in sorted(warc.glob("*.warc.gz")):
        with path.open("rb") as stream:
            for rec in ArchiveIterator(stream):
                if rec.rec_type in ("response", "revisit"):
                    h = rec.rec_headers
                    records.setdefault(h.get_header("WARC-Target-URI"), []).append(
                        (rec.rec_type, h.get_header("WARC-Profile"), h.get_header("WARC-Refers-To"),
                         h.get_header("WARC-Refers-To-Date"), h.get_header("WARC-Record-ID"),
                         h.get_header("WARC-Date"), h.get_header("WARC-Payload-Digest"), rec.http_headers.get_statuscode()))
    assert not any(r[0] == "response" and r[7] == "304" for rs in records.values() for r in rs)
    ours = "<urn:uuid:00010203-0405-0607-0809-0a0b0c0d0e0f>"
    nm = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
    same = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    assert len(records[cond.url]) == 1
    assert records[cond.url][0][:4] == ("revisit", nm, ours, _date(RDATE))
    assert records[cond.url][0][6:] == (None, "304")  # no payload digest; the 304's head as received
    assert records[trust2.url][0][:4] == ("revisit", nm, None, None)  # no WARC part: the URI alone
    assert records[verify.url][0][:3] == ("revisit", same, ours)
    assert records[trust4.url][0][:2] == ("response", None)  # the payload is not the stored one's
    assert [r[0] for r in records[fresh.url]] == ["response", "response"]
    stats = out["stats"]
    assert records[quiet[7].url][0][:4] == ("revisit", nm, None, None)  # every 304, a revisit or not
    assert stats["crawler/warc/revisit_records/server-not-modified"] == 5
    assert stats["crawler/warc/revisit_records/identical-payload-digest"] == 1
    assert stats["crawler/recrawl/not_modified"] == 4
    assert stats["crawler/recrawl/conditional"] == 4
    assert stats["crawler/recrawl/verify"] == 1

    # the capture each tracked page's history takes, as the writer wrote it
    def capture(name: str, url: str) -> dict[str, Any]:
        (rec,) = [r for r in records[url] if r[4] == _rid(metas[name][RECRAWL_SEEN]["capture"]["rid"])]
        return {"rec": rec, **metas[name][RECRAWL_SEEN]["capture"]}

    c = capture("cond", cond.url)
    assert c["profile"] == "server-not-modified" and c["wd"] == b"wdwdwd"  # the capture it refers to
    assert _date(c["rdate"]) == c["rec"][5]
    c = capture("verify", verify.url)
    assert c["profile"] == "identical-payload-digest" and c["wd"] == hashlib.sha1(verify.body).digest()[:6]
    c = capture("trust4", trust4.url)
    assert c["profile"] == "response" and c["wd"] == hashlib.sha1(trust4.body).digest()[:6]
    assert _date(c["rdate"]) == c["rec"][5]
    assert "capture" not in metas["untracked"].get(RECRAWL_SEEN, {})


def test_the_text_signature_ignores_the_noise(site) -> None:
    web, pages = site
    noisy = next(p for p in pages if p.noisy)
    cases = [{"name": "noisy1", "entry": noisy.plain()}, {"name": "noisy2", "entry": noisy.plain()}]
    out = crawl(cases, CRAWLER_RECRAWL="adaptive", CRAWLER_RECRAWL_SIGNATURE="text")
    seen = {name: unhex(meta)[RECRAWL_SEEN] for name, meta in out["metas"].items()}
    assert seen["noisy1"]["chg"] == seen["noisy2"]["chg"] == text_key(noisy.body)
    assert text_key(noisy.body) != text_key(next(p for p in pages if p.k != noisy.k).body)
    # a spider that signs its pages itself: the middleware leaves chg to it
    out = crawl(cases[:1], CRAWLER_RECRAWL="adaptive", CRAWLER_RECRAWL_SIGNATURE="text", recrawl_signature=True)
    assert unhex(out["metas"]["noisy1"])[RECRAWL_SEEN]["chg"] is None


def test_billion_signs_its_pages_from_its_own_tree(site) -> None:
    from crawler.spiders.billion import BillionSpider

    shown = {"CRAWLER_RECRAWL_INTERVAL": 604_800, "CRAWLER_RECRAWL_MIN": 86_400, "CRAWLER_RECRAWL_MAX": 5_184_000,
             "CRAWLER_RECRAWL_SIGNATURE": "text", "CRAWLER_RECRAWL_MAX_TRACKED": 20_000_000}
    assert {k: BillionSpider.custom_settings[k] for k in shown} == shown
    assert "CRAWLER_RECRAWL" not in BillionSpider.custom_settings and BillionSpider.recrawl_signature is True
    web, pages = site
    noisy = next(p for p in pages if p.noisy)
    quiet = next(p for p in pages if not p.noisy)
    cases = [{"name": "noisy1", "entry": noisy.plain()}, {"name": "noisy2", "entry": noisy.plain()},
             {"name": "cond", "entry": quiet.entry(NOT_VERIFY)}]
    out = crawl(cases, CRAWLER_RECRAWL="fixed", billion=True)
    metas = {name: unhex(meta) for name, meta in out["metas"].items()}
    assert metas["noisy1"][RECRAWL_SEEN]["chg"] == metas["noisy2"][RECRAWL_SEEN]["chg"] == text_key(noisy.body)
    assert out["stats"]["crawler/links/found"] > 0  # the signature came with the links
    # a 304: billion's parse never runs, and the lease would end n
    assert set(out["called"]) == {"noisy1", "noisy2"} and out["errback"] == []
    assert metas["cond"]["crawler_end"] == "n" and metas["cond"][RECRAWL_SEEN]["chg"] is None
    # with recrawl off nothing of it loads: no RECRAWL_SEEN, no validators
    out = crawl(cases[:1], billion=True)
    assert RECRAWL_SEEN not in out["metas"]["noisy1"]


def test_the_addon_places_the_middleware_only_when_recrawl_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from scrapy.settings import Settings

    from crawler.addon import Addon, changes
    from crawler.middlewares.recrawl import RecrawlMiddleware

    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    for mode, placed in (("off", None), ("fixed", 585), ("adaptive", 585)):
        settings = Settings()
        settings.setdict({"CRAWLER_RECRAWL": mode}, priority="project")
        Addon().update_settings(settings)
        assert settings.getdict("DOWNLOADER_MIDDLEWARES").get(RecrawlMiddleware) == placed, mode
        assert ("RecrawlMiddleware" in "; ".join(changes(settings))) == (placed is not None)
    with pytest.raises(NotConfigured):
        RecrawlMiddleware(get_crawler(settings_dict={"CRAWLER_RECRAWL": "off"}))


def test_the_capture_is_told_before_the_page_counts_as_written(tmp_path: Path) -> None:
    from crawler.warcfile import Page as WarcPage, WarcWriter

    writer = WarcWriter(lambda n: tmp_path / f"w-{n}.warc.gz", max_queued=4)
    told: list[tuple[int, int, str]] = []
    for i in range(1, 9):
        page = WarcPage("http://a.test/", "GET", [], b"", 304 if i % 2 else 200, [], b"" if i % 2 else b"x" * i,
                        not_modified=bool(i % 2))
        page.on_capture = lambda capture, i=i: told.append((i, writer.written, capture.profile))
        assert writer.put(page) == i
    writer.close()
    assert [(i, written) for i, written, _ in told] == [(i, i - 1) for i in range(1, 9)]
    assert [profile for *_, profile in told] == [
        "http://netpreserve.org/warc/1.1/revisit/server-not-modified", ""] * 4


def _rid(rid: bytes) -> str:
    import uuid

    return f"<urn:uuid:{uuid.UUID(bytes=rid)}>"


def _date(us: int) -> str:
    from datetime import datetime, timedelta, timezone

    return (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
