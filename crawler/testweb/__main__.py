"""``python -m crawler.testweb``: run the test web until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

from crawler.testweb.config import WebConfig
from crawler.testweb.server import RequestLog, serve
from crawler.testweb.site import Site


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m crawler.testweb", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8800, help="0 picks a free port")
    p.add_argument("--config", default="", help="JSON object of WebConfig fields, or @file")
    p.add_argument("--domains", type=int)
    p.add_argument("--pages", type=int)
    p.add_argument("--links", type=int)
    p.add_argument("--size-fixed", type=int)
    p.add_argument("--log", type=Path, help="also append the request log to this file")
    return p.parse_args(argv)


async def _main(args: argparse.Namespace) -> None:
    text = args.config
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    data = json.loads(text) if text.strip() else {}
    for key in ("domains", "pages", "links", "size_fixed"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    config = WebConfig.from_json(json.dumps(data))
    port = args.port or _free_port(args.host)
    site = Site(config, port)
    log = RequestLog(args.log)
    server = await serve(site, log, args.host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.2)
            log.flush()

    task = asyncio.create_task(flusher())
    print(f"READY port={port}", flush=True)
    print(
        f"test web on http://{args.host}:{port}/ serving {config.domains} domains "
        f"({config.domain(0)} ... {config.domain(config.domains - 1)}) "
        f"x {config.pages} pages",
        file=sys.stderr, flush=True,
    )
    await stop.wait()
    task.cancel()
    server.close()
    log.close()


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        asyncio.run(_main(args))
    except ValueError as exc:
        print(f"testweb: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
