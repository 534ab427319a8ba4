"""A request as the bytes sent for it: request line, headers, body."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from urllib.parse import ParseResult

    from scrapy import Request

    from crawler.fetch._proxy import Proxy

#: what Scrapy's HttpCompressionMiddleware puts in every request (scrapy 2.19)
SCRAPY_ACCEPT_ENCODING = b"gzip, deflate, br, zstd"


def serialize(request: Request, url: ParseResult, target: tuple[str, str, int], proxy: Proxy | None,
              accept_encoding: bytes) -> bytes:
    """``request`` to ``target`` (scheme, host, port), through ``proxy`` if
    any. A request's own ``Accept-Encoding`` is sent as it is; the value
    Scrapy's compression middleware puts in, or none, becomes
    ``accept_encoding`` (the codings decoded here, under the cap)."""
    path = url.path or "/"
    if url.params:
        path += ";" + url.params
    if url.query:
        path += "?" + url.query
    netloc = url.netloc.rpartition("@")[2]
    if proxy is not None and target[0] == "http":
        path = f"http://{netloc}{path}"  # absolute-form, for the proxy
    headers = request.headers
    lines = [f"{request.method} {path} HTTP/1.1".encode("ascii")]
    if b"Host" not in headers:
        lines.append(b"Host: " + netloc.encode("ascii"))
    if b"Accept-Encoding" not in headers:
        lines.append(b"Accept-Encoding: " + accept_encoding)
    tunnelled = proxy is not None and target[0] == "https"
    for name, values in headers.items():
        if name == b"Accept-Encoding" and values == [SCRAPY_ACCEPT_ENCODING]:
            values = [accept_encoding]
        elif name == b"Proxy-Authorization" and (tunnelled or proxy is None):
            continue  # for the proxy only: on the CONNECT request, never to the target
        for value in values:
            lines.append(name + b": " + value)
    body = request.body
    if body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
    lines.append(b"\r\n")
    return b"\r\n".join(lines) + body
