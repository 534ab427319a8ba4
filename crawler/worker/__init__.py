"""The worker session: what components (middlewares, extensions, spiders,
commands) import. ``crawler.worker_session`` on a crawl is a
:class:`WorkerSession` (``session_of(crawler)``; ``crawler.frontier`` is a
deprecated alias); its :meth:`~WorkerSession.next_lease` leases a request as
a :class:`Lease`, which ends once, with ``Lease.ack(end)``. Modules whose
names start with ``_`` are the session's own.
"""

from typing import Any

from scrapy.utils.misc import load_object

from crawler.store import DEAD, DISALLOWED, ENDS, LOST, REDIRECTED, SKIPPED, STORED, UNKNOWN, Frontier, Keys
from crawler.worker._leases import Lease, Storage, end_of
from crawler.worker.session import Engine, WorkerSession, publish, session_of


def uses_frontier(crawler: Any) -> bool:
    """Whether the crawl's ``SCHEDULER`` runs a worker session (the frontier scheduler)."""
    scheduler = crawler.settings.get("SCHEDULER")
    cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
    return isinstance(cls, type) and bool(getattr(cls, "runs_worker_session", False))


__all__ = ["DEAD", "DISALLOWED", "ENDS", "LOST", "REDIRECTED", "SKIPPED", "STORED", "UNKNOWN", "Engine", "Frontier",
           "Keys", "Lease",
           "Storage", "WorkerSession", "end_of", "publish", "session_of", "uses_frontier"]
