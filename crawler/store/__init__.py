"""The frontier in Redis, without Scrapy's engine: its keys and Lua scripts
(``keys``), the queues (``frontier``: the crawl's calls; ``records``: what
they take and return; ``views``: the operators' calls, status, clearing),
the epoch check (``epoch``), the ledger of ends (``ledger``), the stores
beside the queues (``stores``: domain locks, robots.txt records, dead
letters) and the entries' encoding (``codec``). The worker session (``crawler.worker``) runs a crawl on it;
the commands that work on a frontier without a crawl (``scrapy frontier``,
``scrapy dlq``) use it directly. Everything public is named here.
"""

from crawler.store.epoch import REPLACED, REWOUND, VANISHED, Epoch, FrontierLost
from crawler.store.frontier import (
    DEDUP_MODES,
    Acknowledgement,
    AddResult,
    AddressPoliteness,
    Dedup,
    Frontier,
    FrontierConfigError,
    Item,
    Leased,
    Lookup,
    Politeness,
    Promotion,
    Reply,
    TakeResult,
    bloom_error_rate,
    stored_dedup,
)
from crawler.store.keys import Keys, LuaScript, Scripts
from crawler.store.records import (
    CHANGED,
    CREATE,
    DELETE,
    FIRST,
    LIES,
    NOT_MODIFIED_304,
    UNCHANGED,
    UPDATE,
    Hint,
    HintResult,
    HistoryWrite,
    Recrawl,
    wire_writes,
)
from crawler.store.ledger import (
    DEAD,
    DISALLOWED,
    END_STATES,
    ENDS,
    LOST,
    NOT_MODIFIED,
    REDIRECTED,
    SKIPPED,
    STORED,
    STORED_ENDS,
    UNKNOWN,
    Ledger,
    describe,
)
from crawler.store.stores import DeadLetter, DeadLetters, DomainLocks, RobotsStore

__all__ = ["CHANGED", "CREATE", "DEAD", "DEDUP_MODES", "DELETE", "DISALLOWED", "END_STATES", "ENDS", "FIRST", "LIES",
           "LOST", "NOT_MODIFIED", "NOT_MODIFIED_304", "REDIRECTED", "REPLACED", "REWOUND", "SKIPPED", "STORED",
           "STORED_ENDS", "UNCHANGED", "UNKNOWN", "UPDATE", "VANISHED", "Acknowledgement", "AddResult",
           "AddressPoliteness", "DeadLetter", "DeadLetters", "Dedup", "DomainLocks", "Epoch", "Frontier",
           "FrontierConfigError", "FrontierLost", "Hint", "HintResult", "HistoryWrite", "Item", "Keys", "Leased", "Ledger", "Lookup",
           "LuaScript", "Politeness", "Promotion", "Recrawl", "Reply", "RobotsStore", "Scripts", "TakeResult", "bloom_error_rate",
           "describe", "stored_dedup", "wire_writes"]
