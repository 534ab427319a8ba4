"""Work that once held the event loop for more than 100 ms in the job users
run (``bench_openweb.py``: billion with its defaults, 2,000 HTTPS domains),
now done in slices that let the loop run between them, or off its thread
(docs/benchmarks.md, "The loop's worst stall"). No timing is asserted: each
test checks the shape of the work, which a change that brings the stall
back breaks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from scrapy import Request
from scrapy.http import TextResponse
from scrapy.utils.test import get_crawler


def slices(start: AsyncIterator[Request]) -> list[list[str]]:
    """The URLs ``start`` yields, grouped by the turns of the loop between
    them: driven by hand, each time its coroutine yields to the loop instead
    of giving a request (``asyncio.sleep(0)``) a new group begins."""
    groups: list[list[str]] = [[]]
    while True:
        step = start.__anext__()
        try:
            while True:
                step.send(None)  # the generator let the loop run here: a turn
                groups.append([])
        except StopIteration as done:
            groups[-1].append(done.value.url)
        except StopAsyncIteration:
            return [group for group in groups if group]


def test_seeds_go_to_the_engine_a_slice_per_turn_of_the_loop(tmp_path: Path) -> None:
    """billion's start requests come ``SEEDS_PER_TURN`` seed lines at a
    time, with a turn of the loop between two slices: Scrapy's engine takes
    them one after the other without one while its downloader is full, and
    2,000 seeds held the loop 150-340 ms before the first page was fetched.
    Bad lines count in a slice (each is parsed); the shard's filter and the
    stats are as before."""
    from crawler.identity import domain_of
    from crawler.seeds import parse_seeds
    from crawler.sharding import shard_of
    from crawler.spiders import billion as module

    lines = [f"https://d{i}.test/" for i in range(1_000)]
    lines[7] = "ftp://nope.test/"  # a bad line: reported, skipped, counted
    lines[500] = "# a comment"
    (tmp_path / "seeds.txt").write_text("\n".join(lines) + "\n")
    crawler = get_crawler(module.BillionSpider, settings_dict={"ROBOTSTXT_OBEY": False})
    spider = module.BillionSpider.from_crawler(crawler, seeds=str(tmp_path / "seeds.txt"), shard="1", shards="2")

    groups = slices(spider.start())
    seeds, errors = parse_seeds(lines)
    mine = [seed.url for seed in seeds if shard_of(domain_of(seed.url), 2) == 1]
    assert [url for group in groups for url in group] == mine  # every seed of the shard, in order
    assert 0 < len(mine) < len(seeds)
    # a slice is at most SEEDS_PER_TURN lines parsed, of which about half are this shard's
    per_turn = getattr(module, "SEEDS_PER_TURN", 100)
    assert len(groups) >= len(lines) // per_turn - 1
    assert max(len(group) for group in groups) <= per_turn
    assert crawler.stats.get_value("crawler/seeds/total") == len(seeds) == 998
    assert crawler.stats.get_value("crawler/seeds/own_shard") == len(mine)
    assert crawler.stats.get_value("crawler/seeds/bad_lines") == len(errors) == 1


def test_robots_store_round_trips_are_made_off_the_loops_thread(redis_url: str) -> None:
    """Every round trip of the robots.txt store (read, fetch claim, record,
    end of the claim) runs on a thread of the middleware's, not on the
    loop's: made there, the first contact with a few thousand domains held
    the loop 100-260 ms at a time while Redis answered (up to 64 requests
    start in one turn, each origin four or five round trips)."""
    from crawler.middlewares.robots import SharedRobotsMiddleware
    from crawler.scheduler import FrontierScheduler
    from tests.servers import crawler_for

    crawler = crawler_for(redis_url, ROBOTSTXT_OBEY=True, SCHEDULER="crawler.scheduler.FrontierScheduler")
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    try:
        robots = SharedRobotsMiddleware(crawler)
        store = crawler.worker_session.robots
        calls: list[tuple[str, int]] = []
        for name in ("get", "claim", "put", "done"):
            def traced(*args: Any, _call: Any = getattr(store, name), _name: str = name) -> Any:
                calls.append((_name, threading.get_ident()))
                return _call(*args)
            setattr(store, name, traced)

        async def download_async(request: Request) -> TextResponse:
            assert request.url == "http://a.test/robots.txt"
            return TextResponse(request.url, status=200, body=b"User-agent: *\nDisallow: /no\n",
                                encoding="utf-8", request=request)

        crawler.engine.download_async = download_async  # type: ignore[union-attr,method-assign]

        async def ask() -> tuple[Any, int]:
            return await robots.verdict("http://a.test"), threading.get_ident()

        rules, loop_thread = asyncio.run(ask())
        assert not rules.allowed("http://a.test/no") and rules.allowed("http://a.test/yes")
        assert [name for name, _ in calls] == ["get", "claim", "get", "put", "done"]
        assert all(thread != loop_thread for _, thread in calls), calls
        robots.local.clear()  # a second process's view: the record is read back, off the loop too
        calls.clear()
        rules, loop_thread = asyncio.run(ask())
        assert not rules.allowed("http://a.test/no")
        assert [name for name, _ in calls] == ["get"] and calls[0][1] != loop_thread
        robots.spider_closed()
    finally:
        scheduler.close("finished")


def turns_of(per_turn: int, arrivals: list[int], cancel: int | None = None) -> tuple[list[tuple[int, int]], int]:
    """Callers of one :class:`TurnGate`, ``arrivals[t]`` of them arriving in
    turn ``t`` of the loop: (caller, turn it went on) in the order they went
    on, and the turns the loop ran. A turn is counted by a callback that
    schedules itself again (``call_soon``: once per turn)."""
    from crawler.fetch._turns import TurnGate

    gate = TurnGate(per_turn)
    passed: list[tuple[int, int]] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        turn = 0
        tasks: list[asyncio.Task[None]] = []

        async def caller(n: int) -> None:
            await gate.enter()
            passed.append((n, turn))

        def tick() -> None:
            nonlocal turn
            if turn < len(arrivals):
                for _ in range(arrivals[turn]):
                    tasks.append(loop.create_task(caller(len(tasks))))
            if cancel is not None and turn == 1:  # it waits by now (it arrived in turn 0)
                tasks[cancel].cancel()
            turn += 1
            loop.call_soon(tick)

        loop.call_soon(tick)
        while turn <= len(arrivals) or not all(task.done() for task in tasks):
            await asyncio.sleep(0)
        return turn

    return passed, asyncio.run(main())


def test_the_turn_gate_lets_a_bounded_number_on_per_turn_in_order() -> None:
    """A wave of responses that ended together goes on ``per_turn`` a turn
    of the loop, first come first served; fewer than that go on at once; a
    caller cancelled while it waits (a download's timeout) takes no place."""
    passed, _ = turns_of(4, [30, 0, 0, 3])
    by_turn: dict[int, int] = {}
    for _, turn in passed:
        by_turn[turn] = by_turn.get(turn, 0) + 1
    assert [n for n, _ in passed] == list(range(33))  # every caller, in order of arrival
    assert max(by_turn.values()) <= 4 and len(by_turn) >= 33 // 4
    quiet, _ = turns_of(4, [3, 0, 2])  # under the bound: each goes on in the turn it arrived
    assert len({turn for _, turn in quiet[:3]}) == 1 and len({turn for _, turn in quiet[3:]}) == 1
    cancelled, _ = turns_of(2, [6], cancel=4)
    assert [n for n, _ in cancelled] == [0, 1, 2, 3, 5]


def test_the_download_handler_hands_on_responses_through_the_turn_gate() -> None:
    """Every response the handler returns goes through its gate: a wave of
    answers finished together reaches Scrapy ``RESPONSES_PER_TURN`` a turn."""
    from scrapy.http import Response
    from scrapy.utils.test import get_crawler

    from crawler.fetch import handler as module

    handler = module.DownloadHandler(get_crawler(settings_dict={"CRAWLER_HOST_MAP": {"a.test": "127.0.0.1"}}))

    async def fetch(request: Request, *_: Any) -> Response:
        return Response(request.url, request=request)

    handler.fetch = fetch  # type: ignore[method-assign]  # every answer ready at once

    async def main() -> list[int]:
        turn = 0
        done: list[int] = []

        def tick() -> None:
            nonlocal turn
            turn += 1
            asyncio.get_running_loop().call_soon(tick)

        asyncio.get_running_loop().call_soon(tick)

        async def one(n: int) -> None:
            await handler.download_request(Request(f"http://a.test/{n}"))
            done.append(turn)

        await asyncio.gather(*(one(n) for n in range(40)))
        return done

    done = asyncio.run(main())
    counts = {turn: done.count(turn) for turn in done}
    assert len(done) == 40 and max(counts.values()) <= module.RESPONSES_PER_TURN
    assert handler.turns.held >= 40 - module.RESPONSES_PER_TURN


def test_the_stall_dump_says_what_held_the_loop(tmp_path: Path) -> None:
    """``CRAWLER_LOOP_STALL_DUMP`` (off by default) appends each stall over
    100 ms with the stacks of the loop's thread sampled while it lasted: a
    callback that holds the loop is named there, under the frames every
    sample shares; a loop on time writes nothing."""
    import time

    from crawler.extensions.looplag import STALL_MS, LoopLagProbe
    from tests.servers import wait_until

    assert LoopLagProbe(get_crawler(settings_dict={})).dump is None
    path = tmp_path / "stalls.txt"
    crawler = get_crawler(settings_dict={"CRAWLER_LOOP_STALL_DUMP": str(path)})
    probe = LoopLagProbe(crawler)

    def hold_the_loop() -> None:
        # held until the probe is half as late again as a stall, on any machine
        wait_until(lambda: time.monotonic() > probe.expected + 1.5 * STALL_MS / 1000, 30, "a stall")

    async def main() -> None:
        probe.spider_opened()
        # the loop left free (the wait on a thread) until three probes ran on time: nothing to write
        await asyncio.to_thread(wait_until, lambda: len(probe.minute) >= 3, 30, "three probes")
        assert not path.exists()
        asyncio.get_running_loop().call_soon(hold_the_loop)
        await asyncio.to_thread(wait_until, lambda: path.exists() and path.read_text().endswith("\n\n"), 30,
                                "the stall written out")
        probe.spider_closed()

    asyncio.run(main())
    text = path.read_text()
    assert text.startswith("stall at ") and "late; the loop's thread on a CPU" in text, text
    assert "hold_the_loop" in text, text
    assert probe.dump is not None and probe.dump.stalls == text.count("stall at ") >= 1
