"""The test web's changing pages, validators, 304s and lies (devkit/testweb/changes.py)."""

from __future__ import annotations

import hashlib
import http.client
import math
import socket
from email.utils import formatdate, parsedate_to_datetime

import pytest
from selectolax.lexbor import LexborHTMLParser

from devkit.testweb.changes import Schedule, not_modified
from devkit.testweb.config import WebConfig
from devkit.testweb.control import TestWebProcess

SMALL = dict(domains=2, pages=4, links=10, size_fixed=3000, clock="manual")


def get(web: TestWebProcess, d: int, path: str = "/p/1.html",
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET with request headers of our own (conditionals), on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": f"{web.config.domain(d)}:{web.port}", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def raw(port: int, host: str, path: str, extra: bytes = b"") -> bytes:
    """The answer's every byte, status line and headers included."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n"
                     % (path.encode(), host.encode(), extra))
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    return data


def visible(body: bytes) -> str:
    tree = LexborHTMLParser(body)
    for node in tree.css("script"):
        node.decompose()
    return tree.body.text() if tree.body else ""


def first_changes(web: TestWebProcess, d: int, k: int, count: int = 2) -> list[float]:
    times = Schedule.of(web.config).changes(d, k, 0, 10_000)
    assert len(times) >= count
    return times[:count]


# --- off by default ------------------------------------------------------------

#: sha256 of every byte of these answers, recorded from the test web before
#: changing pages existed (with conditionals sent or not: it ignored them)
TODAY = {
    ("d0.test", "/"): "8191dac2bcefede87e4e103c5a9882034ce5ccebeb02ffdcc0e80fc9f0b4dc18",
    ("d1.test", "/p/3.html"): "6440098510886bcbf246b7c0d34c4af31a15c93d3992673f1cd85f5bea3670f0",
    ("d2.test", "/p/5.html"): "f4396ea0755117008978e301d91c8ddafdee2f9d20d913afcf262cd946db31a4",
    ("d1.test", "/robots.txt"): "9806bf9d54485f6d7659bcb1e80b89e55a71efadd1ff84733843ae337d3d5b32",
}


def test_the_default_config_serves_todays_bytes_and_ignores_conditionals(make_web) -> None:
    web = make_web(domains=3, pages=6, meta_nofollow_share=0.3, header_nofollow_share=0.3, public_port=8080)
    conditionals = b'If-None-Match: "x", *\r\nIf-Modified-Since: Sun, 06 Nov 2050 08:49:37 GMT\r\n'
    for (host, path), digest in TODAY.items():
        for extra in (b"", conditionals):
            answer = raw(web.port, host, path, extra)
            assert hashlib.sha256(answer).hexdigest() == digest, (host, path, answer[:300])
            assert b"ETag" not in answer[:400] and b"Date:" not in answer[:400]
    log = web.log()
    assert [e.status for e in log] == [200] * 8
    assert [e.conditionals for e in log] == ["-", "nm"] * 4
    pages = [e for e in log if e.path != "/robots.txt"]
    assert {(e.version, e.current) for e in pages} == {(0, 0)}
    robots = [e for e in log if e.path == "/robots.txt"]
    assert {(e.version, e.current, e.at) for e in robots} == {(None, None, None)}


# --- the schedule --------------------------------------------------------------

def test_the_schedule_is_a_pure_function_of_the_seed() -> None:
    config = WebConfig(domains=20, pages=100, change_share=0.5, seed=7)
    a, b = Schedule.of(config), Schedule.of(config)
    b.version_at(3, 4, 5_000)  # drawn in another order: the same times
    pages = [(d, k) for d in range(20) for k in range(100)]
    assert [a.changes(d, k, 0, 20_000) for d, k in pages] == [b.changes(d, k, 0, 20_000) for d, k in pages]
    other = Schedule.of(WebConfig(domains=20, pages=100, change_share=0.5, seed=8))
    assert [a.changes(d, k, 0, 20_000) for d, k in pages] != [other.changes(d, k, 0, 20_000) for d, k in pages]
    means = [m for d, k in pages if (m := a.mean_s(d, k)) is not None]
    assert abs(len(means) / len(pages) - 0.5) < 0.05  # change_share of the pages change
    assert min(means) < 15 and max(means) > 6_000  # log-uniform over 10 .. 10,000 s
    decades = {math.floor(math.log10(m)) for m in means}
    assert decades == {1, 2, 3}
    for d, k in pages[:300]:
        times = a.changes(d, k, 0, 20_000)
        assert times == sorted(times)
        for t0, t1 in ((0, 20_000), (1_000, 3_000), (5_000, 5_000)):
            inside = a.changes(d, k, t0, t1)
            assert all(t0 <= t <= t1 for t in inside)
            assert len(inside) == a.version_at(d, k, t1) - a.version_at(d, k, math.nextafter(t0, -1))
        for n, t in enumerate(times[:5], start=1):
            assert a.version_at(d, k, t) == n and a.version_at(d, k, math.nextafter(t, -1)) == n - 1
            assert a.version_time(d, k, n) == t


def test_a_poisson_page_changes_at_its_mean_rate() -> None:
    schedule = Schedule.of(WebConfig(domains=1, pages=400, change_share=1, change_mean_min_s=50,
                                     change_mean_max_s=50))
    counts = [len(schedule.changes(0, k, 0, 10_000)) for k in range(400)]
    mean = sum(counts) / len(counts)
    variance = sum((c - mean) ** 2 for c in counts) / len(counts)
    assert abs(mean / 200 - 1) < 0.02  # 10,000 s / 50 s
    assert abs(variance / mean - 1) < 0.25  # Poisson: the variance is the mean


# --- bodies on the schedule clock ----------------------------------------------

def test_a_page_changes_exactly_at_its_scheduled_times(make_web) -> None:
    web = make_web(**SMALL, change_share=1, change_mean_min_s=100, change_mean_max_s=100)
    t1, t2 = first_changes(web, 1, 2)
    bodies = []
    for t, version in ((0.0, 0), (math.nextafter(t1, -1), 0), (t1, 1), (math.nextafter(t2, -1), 1), (t2, 2)):
        assert web.clock(set_to=t)["now"] == t
        status, headers, body = get(web, 1, "/p/2.html")
        assert status == 200 and len(body) == 3000 == int(headers["Content-Length"])
        assert f"version {version}:" in visible(body)
        bodies.append(body)
    assert bodies[0] == bodies[1] != bodies[2] == bodies[3] != bodies[4]
    log = web.log()
    assert [(e.version, e.current) for e in log] == [(0, 0), (0, 0), (1, 1), (1, 1), (2, 2)]
    assert [e.at for e in log] == pytest.approx([0.0, t1, t1, t2, t2], abs=2e-3)
    with pytest.raises(ValueError, match="does not go back"):
        web.clock(set_to=1.0)


def test_only_a_manual_clock_moves_by_request(make_web) -> None:
    web = make_web(domains=1, pages=2, size_fixed=2000, change_share=1)
    with pytest.raises(ValueError, match="not manual"):
        web.clock(advance=5)
    assert web.clock()["manual"] is False and web.clock()["now"] >= 0


def test_a_page_that_does_not_change_keeps_its_bytes(make_web) -> None:
    web = make_web(**SMALL, change_share=0.0001)
    assert Schedule.of(web.config).mean_s(0, 1) is None
    before = get(web, 0)
    web.clock(advance=1e6)
    assert get(web, 0) == before and b"version" not in before[2]


# --- validators and 304s --------------------------------------------------------

def test_strong_etags_answer_304_per_rfc_9110(make_web) -> None:
    web = make_web(**SMALL, change_share=1, change_mean_min_s=100, change_mean_max_s=100, validators={"etag": 1})
    t1, _ = first_changes(web, 0, 1)
    status, headers, body = get(web, 0)
    tag = headers["ETag"]
    assert status == 200 and tag.startswith('"') and "Last-Modified" not in headers and "Date" in headers
    status, headers304, body304 = get(web, 0, headers={"If-None-Match": tag})
    assert status == 304 and body304 == b"" and headers304["ETag"] == tag and "Date" in headers304
    assert "Content-Length" not in headers304 and "Content-Type" not in headers304
    assert get(web, 0, headers={"If-None-Match": f'"other", W/{tag}'})[0] == 304  # weak comparison, a list
    assert get(web, 0, headers={"If-None-Match": "*"})[0] == 304
    # If-None-Match decides alone: a date far ahead does not make it 304
    late = "Sun, 06 Nov 2050 08:49:37 GMT"
    assert get(web, 0, headers={"If-None-Match": '"other"', "If-Modified-Since": late})[0] == 200
    web.clock(set_to=t1)
    status, headers, changed = get(web, 0, headers={"If-None-Match": tag})
    assert status == 200 and headers["ETag"] != tag and changed != body
    log = web.log()
    assert [(e.status, e.version, e.current, e.conditionals) for e in log] == [
        (200, 0, 0, "-"), (304, None, 0, "n"), (304, None, 0, "n"), (304, None, 0, "n"), (200, 0, 0, "nm"),
        (200, 1, 1, "n")]


def test_weak_etags_match_weakly(make_web) -> None:
    web = make_web(**SMALL, change_share=1, validators={"weak_etag": 1})
    _, headers, _ = get(web, 1)
    tag = headers["ETag"]
    assert tag.startswith('W/"') and "Last-Modified" not in headers
    assert get(web, 1, headers={"If-None-Match": tag})[0] == 304
    assert get(web, 1, headers={"If-None-Match": tag.removeprefix("W/")})[0] == 304


def test_last_modified_only(make_web) -> None:
    web = make_web(**SMALL, change_share=1, change_mean_min_s=100, change_mean_max_s=100,
                   validators={"last_modified": 1})
    t1, _ = first_changes(web, 0, 1)
    web.clock(set_to=t1 + 3.5)
    origin = web.clock()["origin"]
    status, headers, _ = get(web, 0)
    assert status == 200 and "ETag" not in headers
    modified = parsedate_to_datetime(headers["Last-Modified"]).timestamp()
    assert modified == math.floor(origin + t1)  # the version's own time, not now
    assert parsedate_to_datetime(headers["Date"]).timestamp() == math.floor(origin + t1 + 3.5)
    status, headers304, body = get(web, 0, headers={"If-Modified-Since": headers["Last-Modified"]})
    assert status == 304 and body == b"" and headers304["Last-Modified"] == headers["Last-Modified"]
    earlier = formatdate(modified - 1, usegmt=True)
    assert get(web, 0, headers={"If-Modified-Since": earlier})[0] == 200
    # an If-None-Match to a page without an ETag decides alone: never 304
    assert get(web, 0, headers={"If-None-Match": '"x"', "If-Modified-Since": headers["Last-Modified"]})[0] == 200


def test_a_page_without_validators_never_answers_304(make_web) -> None:
    web = make_web(**SMALL, change_share=1, validators={"none": 1})
    late = "Sun, 06 Nov 2050 08:49:37 GMT"
    status, headers, _ = get(web, 0, headers={"If-None-Match": "*", "If-Modified-Since": late})
    assert status == 200 and "ETag" not in headers and "Last-Modified" not in headers


# --- lies -----------------------------------------------------------------------

def lying(make_web, lie: str, validators: str = "none") -> tuple[TestWebProcess, float]:
    web = make_web(**SMALL, change_share=1, change_mean_min_s=100, change_mean_max_s=100,
                   validators={validators: 1}, lies={lie: 1})
    t1, _ = first_changes(web, 0, 1)
    return web, t1


def test_a_host_that_ignores_conditionals_always_answers_200(make_web) -> None:
    web, _ = lying(make_web, "ignore_conditionals")
    _, headers, _ = get(web, 0)
    assert "ETag" in headers and "Last-Modified" in headers
    status, _, body = get(web, 0, headers={"If-None-Match": headers["ETag"],
                                           "If-Modified-Since": headers["Last-Modified"]})
    assert status == 200 and len(body) == 3000


def test_last_modified_always_now(make_web) -> None:
    web, _ = lying(make_web, "lm_now")
    web.clock(set_to=7.25)
    _, headers, _ = get(web, 0)
    assert headers["Last-Modified"] == headers["Date"]
    web.clock(advance=2)
    _, later, _ = get(web, 0, headers={"If-Modified-Since": headers["Last-Modified"]})
    assert later["Last-Modified"] == later["Date"] != headers["Date"]


def test_last_modified_frozen_answers_304_to_a_changed_page(make_web) -> None:
    web, t1 = lying(make_web, "lm_frozen")
    _, headers, before = get(web, 0)
    web.clock(set_to=t1 + 1)
    status, headers304, _ = get(web, 0, headers={"If-Modified-Since": headers["Last-Modified"]})
    assert status == 304 and headers304["Last-Modified"] == headers["Last-Modified"]
    status, fresh, after = get(web, 0)
    assert status == 200 and fresh["Last-Modified"] == headers["Last-Modified"] and after != before
    assert [(e.status, e.version, e.current) for e in web.log()] == [(200, 0, 0), (304, None, 1), (200, 1, 1)]


def test_a_frozen_etag_answers_304_to_a_changed_page(make_web) -> None:
    web, t1 = lying(make_web, "etag_frozen", "last_modified")
    _, headers, before = get(web, 0)
    assert "ETag" in headers and "Last-Modified" in headers
    web.clock(set_to=t1 + 1)
    status, _, after = get(web, 0)
    assert status == 200 and after != before
    # If-None-Match wins over the honest Last-Modified, and lies
    status, _, _ = get(web, 0, headers={"If-None-Match": headers["ETag"],
                                        "If-Modified-Since": headers["Last-Modified"]})
    assert status == 304
    assert get(web, 0, headers={"If-Modified-Since": headers["Last-Modified"]})[0] == 200  # honest alone


# --- noise ----------------------------------------------------------------------

def test_a_noisy_page_changes_its_bytes_not_its_visible_text(make_web) -> None:
    web = make_web(**SMALL, noisy_share=1, validators={"etag": 1})
    answers = [get(web, 0) for _ in range(3)]
    bodies = [body for _, _, body in answers]
    assert len(set(bodies)) == 3 and {len(body) for body in bodies} == {3000}
    assert len({visible(body) for body in bodies}) == 1
    assert all(b"data-token=" in body and b"<script>" in body for body in bodies)
    assert len({headers["ETag"] for _, headers, _ in answers}) == 1  # the version did not change
    quiet = make_web(**SMALL, noisy_share=0.0001)
    assert len({get(quiet, 0)[2] for _ in range(2)}) == 1


# --- the rules alone, and the config ---------------------------------------------

@pytest.mark.parametrize(("etag", "modified", "inm", "ims", "expected"), [
    ('"a"', None, '"a"', None, True),
    ('"a"', None, 'W/"a"', None, True),
    ('W/"a"', None, '"a"', None, True),
    ('"a"', None, '"b"', None, False),
    (None, 100.0, '"a"', "Thu, 01 Jan 1970 00:01:40 GMT", False),  # If-None-Match alone decides
    (None, 100.9, None, "Thu, 01 Jan 1970 00:01:40 GMT", True),  # whole seconds
    (None, 101.0, None, "Thu, 01 Jan 1970 00:01:40 GMT", False),
    (None, 100.0, None, "not a date", False),
    ('"a"', 100.0, None, None, False),
])
def test_not_modified_follows_rfc_9110(etag, modified, inm, ims, expected) -> None:
    assert not_modified(etag, modified, inm, ims) is expected


def test_bad_change_config_is_rejected() -> None:
    for bad in (dict(validators={"etags": 1}), dict(lies={"lm_past": 0.5}), dict(change_share=2),
                dict(change_mean_min_s=10, change_mean_max_s=5), dict(clock="lunar"),
                dict(validators={"etag": 0.6, "both": 0.6})):
        with pytest.raises(ValueError, match="bad test web config"):
            WebConfig(**bad)
