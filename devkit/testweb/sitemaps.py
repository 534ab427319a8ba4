"""Sites of the test web that exist through their sitemaps (``WebConfig.sitemaps``).

``maps.test`` (and ``www.maps.test``): pages ``/s/<k>.html`` that no page
links to; only its sitemaps list them. robots.txt names an index and a text
file; the index lists a plain urlset (served as ``text/html``: a wrong
Content-Type), a gzip urlset (``application/octet-stream``, with lastmod,
changefreq and priority), an RSS 2.0 feed, an Atom feed and a chain of
nested indexes (index -> nest1 -> nest2 -> leaf: the leaf is level 4). Among
the URLs: one robots.txt disallows, one on ``www.maps.test`` (the same
registered domain), one offsite.

``evil.test``: hostile sitemaps: a gzip bomb of ``sitemap_bomb_mib`` MiB
decompressed (made in bounded memory: one compressed MiB repeated), the same
bomb as ``Content-Encoding: gzip``, an index listing itself, two indexes
listing each other, XXE, offsite URLs only, a gzip cut short, and a urlset
served as ``text/html``.

``big.test``: one sitemap of ``sitemap_big_urls`` URLs (robots.txt disallows
them, so a crawl does not fetch them all).

With ``robots_sitemaps``, the robots.txt of every ``d<i>.test`` also names
``/sitemap.xml``, a urlset of that domain's pages (which its pages already
link), for ``bench/bench_openweb.py``.
"""

from __future__ import annotations

import gzip
import struct
import time
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devkit.testweb.site import Reply, Site

HOSTS = ("maps.test", "www.maps.test", "evil.test", "big.test")
XML = b"application/xml"
_NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _urlset(urls: list[str], fields: bool = False) -> bytes:
    extra = "<lastmod>2025-06-01T12:00:00Z</lastmod><changefreq>weekly</changefreq><priority>0.8</priority>"
    items = "".join(f"<url><loc>{u}</loc>{extra if fields else ''}</url>\n" for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {_NS}>\n{items}</urlset>\n'.encode()


def _index(urls: list[str]) -> bytes:
    items = "".join(f"<sitemap><loc>{u}</loc></sitemap>\n" for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex {_NS}>\n{items}</sitemapindex>\n'.encode()


class SitemapSites:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.cache: dict[str, bytes] = {}

    def url(self, host: str, path: str) -> str:
        return f"{self.site.config.scheme}://{host}:{self.site.port}{path}"

    def maps_pages(self, first: int, last: int) -> list[str]:
        return [self.url("maps.test", f"/s/{k}.html") for k in range(first, last)]

    def answer(self, host: str, path: str) -> Reply | None:
        from devkit.testweb.site import Reply, _small

        if path == "/robots.txt":
            return Reply(200, [self.robots(host)], content_type=b"text/plain")
        if path == "/":
            return Reply(200, [f"<!DOCTYPE html><html><body><h1>{host}</h1><p>No links here.</p></body></html>\n"
                               .encode()])
        if host.endswith("maps.test"):
            if path.startswith(("/s/", "/private/")) and path.endswith(".html"):
                return Reply(200, [f"<!DOCTYPE html><html><body><p>{host}{path}</p></body></html>\n".encode()])
            body = self.maps(path)
        elif host == "evil.test":
            if path.startswith("/e/"):
                return Reply(200, [f"<!DOCTYPE html><html><body><p>{path}</p></body></html>\n".encode()])
            return self.evil(path)
        else:
            body = self._cached("big", self.big) if path == "/big.xml" else None
        if body is None:
            return _small(404, "no such sitemap")
        types = {"/sm/plain.xml": b"text/html; charset=utf-8", "/sm/pages.xml.gz": b"application/octet-stream",
                 "/sm/text.txt": b"text/plain", "/sm/rss.xml": b"application/rss+xml",
                 "/sm/atom.xml": b"application/atom+xml"}
        return Reply(200, [body], content_type=types.get(path, XML))

    def robots(self, host: str) -> bytes:
        if host.endswith("maps.test"):
            # a lower-case field inside the group, another line after it
            return (f"User-agent: *\nDisallow: /private/\nsitemap: {self.url('maps.test', '/sitemap_index.xml')}\n"
                    f"Allow: /\n\nSitemap: {self.url('maps.test', '/sm/text.txt')}  # the text one\n").encode()
        if host == "evil.test":
            names = ("/bomb.xml.gz", "/bomb-ce.xml", "/loop.xml", "/xxe.xml", "/offsite.xml", "/trunc.xml.gz",
                     "/wrongtype.xml")
            return ("User-agent: *\nAllow: /\n" + "".join(f"Sitemap: {self.url(host, n)}\n" for n in names)).encode()
        return f"User-agent: *\nDisallow: /b/\nSitemap: {self.url(host, '/big.xml')}\n".encode()

    def maps(self, path: str) -> bytes | None:
        u = lambda p: self.url("maps.test", p)  # noqa: E731
        if path == "/sitemap_index.xml":
            return _index([u("/sm/plain.xml"), u("/sm/pages.xml.gz"), u("/sm/rss.xml"), u("/sm/atom.xml"),
                           u("/sm/nest1.xml")])
        if path == "/sm/plain.xml":
            return _urlset([*self.maps_pages(0, 3), self.url("www.maps.test", "/s/3.html"),
                            u("/private/secret.html"), self.url("elsewhere.test", "/offsite.html")])
        if path == "/sm/pages.xml.gz":
            return gzip.compress(_urlset(self.maps_pages(4, 8), fields=True), mtime=0)
        if path == "/sm/text.txt":
            return ("\n".join(self.maps_pages(8, 12)) + "\nnot a url\n").encode()
        if path == "/sm/rss.xml":
            items = "".join(f"<item><title>{k}</title><link>{url}</link></item>"
                            for k, url in enumerate(self.maps_pages(12, 16)))
            return f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>{items}</channel></rss>'.encode()
        if path == "/sm/atom.xml":
            entries = "".join(f'<entry><title>{k}</title><link rel="alternate" href="{url}"/>'
                              f"<updated>2025-05-01T00:00:00Z</updated></entry>"
                              for k, url in enumerate(self.maps_pages(16, 20)))
            return f'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom">{entries}</feed>'.encode()
        if path == "/sm/nest1.xml":
            return _index([u("/sm/nest2.xml")])
        if path == "/sm/nest2.xml":
            return _index([u("/sm/leaf.xml")])
        if path == "/sm/leaf.xml":
            return _urlset(self.maps_pages(20, 24))
        return None

    def evil(self, path: str) -> Reply | None:
        from devkit.testweb.site import Reply, _small

        u = lambda p: self.url("evil.test", p)  # noqa: E731
        if path == "/bomb.xml.gz":
            return Reply(200, [self._cached("bomb", self.bomb)], content_type=b"application/x-gzip")
        if path == "/bomb-ce.xml":
            return Reply(200, [self._cached("bomb", self.bomb)], content_type=XML,
                         headers=[(b"Content-Encoding", b"gzip")])
        bodies = {
            "/loop.xml": lambda: _index([u("/loop.xml"), u("/loop2.xml")]),
            "/loop2.xml": lambda: _index([u("/loop.xml"), u("/e-pages.xml")]),
            "/e-pages.xml": lambda: _urlset([u("/e/0.html"), u("/e/1.html"), u("/loop.xml")]),
            "/xxe.xml": lambda: (b'<?xml version="1.0"?>\n<!DOCTYPE urlset [<!ENTITY xxe SYSTEM '
                                 b'"file:///etc/passwd">]>\n<urlset><url><loc>&xxe;</loc></url></urlset>\n'),
            "/offsite.xml": lambda: _urlset([self.url("maps.test", "/s/99.html"), "http://other.test/x.html",
                                             "http://evil.test.other.test/"]),
            "/trunc.xml.gz": lambda: (lambda z: z[: len(z) * 2 // 3])(
                gzip.compress(_urlset([u(f"/e/{k}.html") for k in range(2, 40)]), mtime=0)),
            "/wrongtype.xml": lambda: _urlset([u("/e/40.html")]),
        }
        make = bodies.get(path)
        if make is None:
            return _small(404, "no such sitemap")
        content_type = b"text/html" if path == "/wrongtype.xml" else XML
        if path.endswith(".gz"):
            content_type = b"application/gzip"
        return Reply(200, [self._cached(path, make)], content_type=content_type)

    def _cached(self, key: str, make) -> bytes:  # type: ignore[no-untyped-def]
        body = self.cache.get(key)
        if body is None:
            body = self.cache[key] = make()
        return body

    def bomb(self) -> bytes:
        """A urlset whose gzip expands to ``sitemap_bomb_mib`` MiB: a few URLs,
        then spaces. Made in bounded memory: after a full flush each MiB of
        spaces compresses to the same bytes, which are repeated."""
        mib = self.site.config.sitemap_bomb_mib
        head = _urlset([self.url("evil.test", "/e/41.html")]).rsplit(b"</urlset>", 1)[0]
        spaces = b" " * (1 << 20)
        deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        first = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
        again = deflate.compress(spaces) + deflate.flush(zlib.Z_FULL_FLUSH)
        tail = deflate.compress(b"</urlset>\n") + deflate.flush()
        crc = zlib.crc32(head)
        for _ in range(mib):
            crc = zlib.crc32(spaces, crc)
        crc = zlib.crc32(b"</urlset>\n", crc)
        size = (len(head) + (mib << 20) + 10) & 0xFFFFFFFF
        return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first + again * mib + tail
                + struct.pack("<II", crc, size))

    def big(self) -> bytes:
        count = self.site.config.sitemap_big_urls
        return _urlset([self.url("big.test", f"/b/{i}.html") for i in range(count)])

    def domain_sitemap(self, d: int) -> bytes:
        """``d<i>.test/sitemap.xml``: every page of the domain (``robots_sitemaps``),
        each with the ``<lastmod>`` ``WebConfig.sitemap_lastmod`` says."""
        config = self.site.config
        urls = [self.site.url(d, f"/p/{k}.html") for k in range(config.pages)]
        if config.sitemap_lastmod == "fixed":
            return self._cached(f"d{d}", lambda: _urlset(urls, fields=True))
        clock, schedule = self.site.clock, self.site.schedule
        t = clock.now()
        items = []
        for k, url in enumerate(urls):
            if config.sitemap_lastmod == "now":
                modified = clock.wall(t)
            else:
                modified = clock.wall(schedule.version_time(d, k, schedule.version_at(d, k, t)))
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(modified))
            items.append(f"<url><loc>{url}</loc><lastmod>{stamp}</lastmod></url>\n")
        return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {_NS}>\n{"".join(items)}</urlset>\n'.encode()
