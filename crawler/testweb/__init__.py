"""A local web of many virtual domains for tests, benchmarks and the demo.

One server on 127.0.0.1 answers for ``d0.test``, ``d1.test``, ... by the Host
header, with deterministic generated pages, per-domain robots.txt, injected
faults, and a log of every request. Start it with
``python -m crawler.testweb --help``.
"""

from crawler.testweb.config import WebConfig
from crawler.testweb.site import Site

__all__ = ["Site", "WebConfig"]
