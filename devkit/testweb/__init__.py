"""A local web of many virtual domains for tests, benchmarks and the demo.

One server on 127.0.0.1 answers for ``d0.test``, ``d1.test``, ... by the Host
header, with deterministic generated pages, per-domain robots.txt, injected
faults, and a log of every request. With ``WebConfig.addresses`` the domains
spread over many loopback addresses (127.1.0.1, ...) as on shared hosting,
one port on each; ``TestWebProcess.host_map()`` is the crawler's
``CRAWLER_HOST_MAP`` for them. Start it with
``python -m devkit.testweb --help``.
"""

from devkit.testweb.config import WebConfig
from devkit.testweb.site import Site

__all__ = ["Site", "WebConfig"]
