"""The slots of ``lua/dequeue.lua``'s reply have one name on both sides: the
script's ``REPLY`` table (1-based, documented in its header) and
``crawler.store.records.Reply`` (0-based), which ``Frontier.take`` reads by.

The table is read from the script's own code, the line it indexes by, not
from a comment: what is checked is what runs, with no debug path in the
script. A mismatch would read, say, the lease id counter as the epoch."""

from __future__ import annotations

import re

import redis

from crawler.clock import ManualClock
from crawler.store import AddressPoliteness, Frontier, Item, Keys
from crawler.store.codec import encode_url
from crawler.store.records import Reply
from tests.servers import ROOT

_TABLE = re.compile(r"^local REPLY = \{(.*)\}$", re.MULTILINE)


def script_slots() -> dict[str, int]:
    source = (ROOT / "lua" / "dequeue.lua").read_text()
    tables = _TABLE.findall(source)
    assert len(tables) == 1, "dequeue.lua names its reply's slots in one line: local REPLY = {...}"
    return {name: int(index) for name, index in re.findall(r"(\w+) = (\d+)", tables[0])}


def test_the_script_and_python_name_the_same_slots() -> None:
    assert {name.upper(): index - 1 for name, index in script_slots().items()} == \
        {slot.name: slot.value for slot in Reply}


def test_the_header_documents_every_slot() -> None:
    header = (ROOT / "lua" / "dequeue.lua").read_text().split("\nlocal REPLY", 1)[0]
    for name in script_slots():
        assert re.search(rf"^--   {name}\b", header, re.MULTILINE), f"slot {name} is not described"


def test_leases_are_the_last_slots_and_come_in_threes(redis_client: redis.Redis, clock: ManualClock) -> None:
    slots = script_slots()
    assert slots["leases"] == max(slots.values())
    f = Frontier(redis_client, Keys("crawler", "reply", 0), addresses=AddressPoliteness(delay=1.0), clock=clock)
    f.open()
    f.add([Item(bytes([i]) * 32, f"{i}.test", 0, encode_url(f"http://192.0.2.{i}/")) for i in range(1, 4)])
    reply = f.scripts.dequeue(keys=f.script_keys, args=[10, 1000, 0, 1, 0, "", "", 0, 0, *f.epoch.args(), ""])
    assert (len(reply) - Reply.LEASES) == 3 * 3
    assert reply[Reply.NOW] == clock.ms() and reply[Reply.EPOCH].decode() == f.epoch.args()[0]
    assert sorted(reply[Reply.LEASES + 2::3]) == [b"192.0.2.1", b"192.0.2.2", b"192.0.2.3"]
