"""The text signature of a page (design/recrawl.md C.4): what a recrawl
compares to tell a changed page from one whose bytes only moved. Noise (a
nonce in a script, a ``data-`` attribute, a comment, whitespace) leaves it
equal; a one-word visible edit changes it, on a parsed page and on one too
deep for a tree (the linear scan's text). Without ``signature`` the answer is
what it always was."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crawler._hrefscan import BUDGET, SAFE_TAGS, risky, visible_text
from crawler.links import LinkExtractor, Signed

URL = "http://site.test/dir/page.html"
#: CI keeps shared/ beside the clone
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def page(nonce: str = "a1b2c3", data: str = "7", comment: str = "built 10:00", space: str = " ",
         word: str = "quick", deep: int = 0) -> bytes:
    """A page with every kind of noise; ``deep`` unclosed ``<div>`` put it past :func:`risky`."""
    return (
        "<!DOCTYPE html><html><head><title>Fox</title>"
        f'<script>var csrf = "{nonce}";</script><style>.x{{color:red}}</style></head><body>'
        + "<div>" * deep +
        f'<!-- {comment} --><p data-v="{data}">The{space}{word} brown fox</p>{space}\n'
        f'<a href="/next.html" data-t="{data}">jumps&nbsp;over</a><noscript>{nonce}</noscript>'
        f"<template>{nonce}</template><script>track('{nonce}')</script><p>the lazy dog</p></body></html>"
    ).encode()


NOISE = {
    "a nonce in a script": {"nonce": "z9y8x7"},
    "a data- attribute": {"data": "8"},
    "an HTML comment": {"comment": "built 10:01"},
    "whitespace": {"space": " \n\t  "},
}


@pytest.mark.parametrize("deep", [0, SAFE_TAGS * 2], ids=["parsed", "scanned"])
def test_noise_leaves_the_signature_equal_and_a_visible_edit_changes_it(deep: int) -> None:
    extract = LinkExtractor()
    base = page(deep=deep)
    assert risky(base) == bool(deep)
    if deep:  # past the thresholds the existing hostile tests use
        tags = base.count(b"<")
        assert tags > SAFE_TAGS and tags * (tags - 2 * base.count(b"</")) > BUDGET
    before = extract.page(base, URL, signature=True)
    assert isinstance(before, Signed) and extract.scanned == bool(deep)
    assert before.links == ["http://site.test/next.html"] and not before.nofollow
    for name, change in NOISE.items():
        noisy = page(deep=deep, **change)
        assert noisy != base, name
        assert extract.page(noisy, URL, signature=True).signature == before.signature, name
    edited = extract.page(page(deep=deep, word="slow"), URL, signature=True)
    assert edited.signature != before.signature
    assert edited.links == before.links


def test_the_scan_reads_the_text_between_tags() -> None:
    text = " ".join(visible_text(page(deep=SAFE_TAGS * 2)).split())
    assert text == "The quick brown fox jumps over the lazy dog"  # &nbsp; is whitespace too


def test_the_scan_signature_is_linear_on_hostile_pages() -> None:
    extract = LinkExtractor()
    for unit in ("<div>", "<script>", "<!--", "<title>", "<a '", "<div a=\"", "<p>x&amp;"):
        body = ("<html><body>" + unit * (250_000 // len(unit))).encode()
        extract.page(body, URL, signature=True)  # warm
        started = time.perf_counter()
        extract.page(body, URL, signature=True)
        # rule 9: no page holds the loop for 100 ms
        assert time.perf_counter() - started < 0.1, unit


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus of real pages at {CORPUS} (shared/ beside the clone)")
def test_without_signature_the_answer_is_unchanged_on_real_pages() -> None:
    pages = sorted(CORPUS.glob("*.html"))
    assert pages
    extract = LinkExtractor()
    for path in pages:
        body = path.read_bytes()
        url = "https://doc.rust-lang.org/" + "/".join(path.name.split("__"))
        # what page() computed before signatures
        old = extract.resolve(extract.by_scan(body) if risky(body) else extract.by_tree(body), url)
        answer = extract.page(body, url)
        assert type(answer) is tuple and answer == old, path.name
        assert extract(body, url) == old[0]
        signed = extract.page(body, url, signature=True)
        assert (signed.links, signed.nofollow) == old and 0 <= signed.signature < 1 << 48
