from __future__ import annotations

import pytest

from crawler.resolver import HostMap, parse_host_map


def test_patterns_and_exact_names() -> None:
    hosts = HostMap(parse_host_map({"*.test": "127.0.0.1", "api.example.com": "10.1.2.3",
                                    "*.example.com": "10.9.9.9"}))
    assert hosts.lookup("d0.test") == "127.0.0.1"
    assert hosts.lookup("D12.TEST.") == "127.0.0.1"
    assert hosts.lookup("api.example.com") == "10.1.2.3"  # exact beats pattern
    assert hosts.lookup("www.example.com") == "10.9.9.9"
    assert hosts.lookup("example.org") is None
    assert hosts.lookup("test") is None


def test_bad_address_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"CRAWLER_HOST_MAP\['\*.test'\] must be an IP address"):
        parse_host_map({"*.test": "localhost"})
