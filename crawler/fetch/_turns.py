"""At most so many responses handed on in one turn of the event loop.

A response handed to Scrapy is worked on at once, a step a turn of the
loop: its WARC records (two SHA-1 passes and a gzip member of up to 250 kB,
about 1 ms), the spider's parse, the frontier's links. When many answers end
together (a wave of domains whose delays ran out at once, or a loop that was
late, so that more sockets were ready when it looked), every one of them
went through those steps in the same turns: 40-45 pages, 130-230 ms of the
loop's own CPU, with the loop-lag probe's timer waiting behind them
(docs/benchmarks.md, "The loop's worst stall"). :class:`TurnGate` lets
``per_turn`` through in a turn; the others wait, first come first served,
for the turns after, the loop polling its sockets and running its timers
between two.
"""

from __future__ import annotations

import asyncio
from collections import deque


class TurnGate:
    """``await gate.enter()``: at once while fewer than ``per_turn`` passed
    in this turn of the loop and nobody waits; else in a later turn, in the
    order of arrival. No clock is read: a turn ends when the loop runs the
    callback the first arrival of the turn scheduled (``call_soon``)."""

    def __init__(self, per_turn: int) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, got {per_turn}")
        self.per_turn = per_turn
        self.passed = 0  # let through in this turn (at once, or released at its start)
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.held = 0  # how many ever waited
        self._turn_over_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def enter(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a test's next asyncio.run): the old one's turns never come
            self._loop = loop
            self.passed = 0
            self.waiting.clear()
            self._turn_over_scheduled = False
        if self.passed < self.per_turn and not self.waiting:
            self.passed += 1
            self._end_of_turn()
            return
        future: asyncio.Future[None] = loop.create_future()
        self.waiting.append(future)
        self.held += 1
        self._end_of_turn()
        await future  # cancelled while waiting: the turn that reaches it skips it

    def _end_of_turn(self) -> None:
        if not self._turn_over_scheduled:
            self._turn_over_scheduled = True
            asyncio.get_running_loop().call_soon(self._turn_over)

    def _turn_over(self) -> None:
        """A new turn: the next ``per_turn`` waiting go on (they run in the
        turn after this one, as anything woken does)."""
        self._turn_over_scheduled = False
        self.passed = 0
        while self.waiting and self.passed < self.per_turn:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(None)
                self.passed += 1
        if self.passed:
            self._end_of_turn()
