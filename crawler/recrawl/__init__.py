"""The pure core of recrawling (issue 49, design/recrawl.md): a tracked URL's
packed fetch history (:mod:`crawler.recrawl.record`) and the arithmetic of
its revisits, the change-rate estimate, expected freshness, a domain's
optimum under a fetch budget and the interval rule
(:mod:`crawler.recrawl.estimate`).

No I/O: nothing here reads Redis, settings or Scrapy objects. The frontier
and the worker build on it in later commits (the history writes that ride
with the acknowledgements, the revisits ``dequeue.lua`` serves).
"""
