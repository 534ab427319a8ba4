"""The garbage collector's pauses are timed, and with CRAWLER_GC_FREEZE what
is alive at spider open is frozen out of later collections."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from scrapy.utils.test import get_crawler

from crawler.extensions.gcpauses import GcPauses
from tests.servers import run_scrapy, scrapy_env


@pytest.mark.parametrize(("freeze", "young"), [(True, None), (False, 700)])
def test_gc_pauses_are_timed_and_startup_is_frozen(freeze: bool, young: int | None, redis_url: str, make_web,
                                                   tmp_path: Path) -> None:
    web = make_web(domains=2, pages=20, size_fixed=3000, links=6, crawl_delay_share=0.0)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(web.url(d) + "\n" for d in range(2)))
    stats_file = tmp_path / "stats.json"
    args = ["crawl", "billion", "-a", f"seeds={seeds}", "-s", "CRAWLER_DOMAIN_DELAY=0", "-s", "CRAWLER_IP_DELAY=0",
            "-s", "CRAWLER_PROGRESS_INTERVAL=0",
            "-s", f"CRAWLER_WARC_DIR={tmp_path / 'warc'}", "-s", f"CRAWLER_STATS_FILE={stats_file}",
            "-s", f"CRAWLER_GC_FREEZE={freeze}", *(["-s", f"CRAWLER_GC_YOUNG={young}"] if young else [])]
    done = run_scrapy(args, scrapy_env(redis_url, CRAWLER_CONTACT="ops@example.org"))
    assert done.returncode == 0, done.stderr[-3000:]
    stats = json.loads(stats_file.read_text())
    assert stats["crawler/gc/young"] == (young or 20_000)
    assert (stats["crawler/gc/frozen"] > 10_000) if freeze else (stats["crawler/gc/frozen"] == 0)
    assert "Garbage collector:" in done.stderr
    if young:  # at Python's threshold a crawl of 40 pages collects
        assert stats["crawler/gc/collections/0"] > 0 and stats["crawler/gc/pause_ms"] > 0
        assert 0 < stats["crawler/gc/pause_max_ms"] <= stats["crawler/gc/pause_ms"]


def test_young_threshold_is_set_while_the_spider_runs_and_put_back() -> None:
    before = gc.get_threshold()
    pauses = GcPauses(get_crawler(settings_dict={"CRAWLER_GC_FREEZE": False, "CRAWLER_GC_YOUNG": 5000}))
    try:
        pauses.spider_opened()
        assert gc.get_threshold() == (5000, *before[1:])
    finally:
        pauses.spider_closed()
    assert gc.get_threshold() == before


def test_what_a_full_collection_leaves_alive_is_frozen_and_cycles_after_it_are_counted() -> None:
    """A full collection's survivors join the permanent generation (later
    collections do not walk them); a young collection freezes nothing; the
    cycles the collections find are counted in ``crawler/gc/collected``."""

    class Node:
        def __init__(self) -> None:
            self.me = self

    crawler = get_crawler(settings_dict={"CRAWLER_GC_YOUNG": 0})
    pauses = GcPauses(crawler)
    try:
        pauses.spider_opened()
        frozen = gc.get_freeze_count()
        kept = [Node() for _ in range(1000)]
        gc.collect(0)
        assert gc.get_freeze_count() == frozen
        assert any(o is kept[0] for o in gc.get_objects())
        gc.collect()
        assert gc.get_freeze_count() >= frozen + 1000
        assert not any(o is kept[0] for o in gc.get_objects())  # no longer walked
        for _ in range(50):
            Node()  # 50 cycles, unreachable at once
        gc.collect()
    finally:
        pauses.spider_closed()
        gc.unfreeze()
    assert crawler.stats.get_value("crawler/gc/collected") >= 50
    assert crawler.stats.get_value("crawler/gc/frozen") >= frozen + 1000
