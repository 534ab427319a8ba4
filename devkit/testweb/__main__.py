"""``python -m devkit.testweb``: run the test web until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
import tempfile
from pathlib import Path

from devkit.testweb.changes import ScheduleClock
from devkit.testweb.config import WebConfig, layout_addresses
from devkit.testweb.server import Counters, RequestLog, listen, serve
from devkit.testweb.site import Site


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devkit.testweb", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8800, help="0 picks a free port")
    p.add_argument("--config", default="", help="JSON object of WebConfig fields, or @file")
    p.add_argument("--domains", type=int)
    p.add_argument("--pages", type=int)
    p.add_argument("--links", type=int)
    p.add_argument("--size-fixed", type=int)
    p.add_argument("--addresses", type=int, help="spread the domains over this many addresses 127.1.0.1, ...")
    p.add_argument("--address-skew", type=float, help="how unevenly (WebConfig.address_skew)")
    p.add_argument("--log", type=Path, help="also append the request log to this file")
    p.add_argument("--tls", action="store_true", help="serve HTTPS (a certificate made at start)")
    p.add_argument("--ca-file", type=Path, help="where to write the CA certificate (PEM) with --tls")
    return p.parse_args(argv)


def tls_context(config: WebConfig, ca_file: Path) -> ssl.SSLContext:
    """A server context that answers each domain of ``config`` with a
    certificate of its own (made on first use, as real sites have), signed by
    a CA written to ``ca_file`` for clients to trust."""
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(ca_file))
    known = {config.domain(i) for i in range(config.domains)}
    known |= {"www." + name for name in known}
    contexts: dict[str, ssl.SSLContext] = {}

    def context_for(name: str) -> ssl.SSLContext:
        context = contexts.get(name)
        if context is None:
            context = contexts[name] = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            # the client's order of cipher suites wins, as by default in nginx
            # and Apache (Python's servers impose their own)
            context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
            ca.issue_cert(name).configure_cert(context)
        return context

    def pick(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        if name and name.lower() in known:
            sock.context = context_for(name.lower())

    default = context_for("127.0.0.1")
    default.sni_callback = pick  # type: ignore[assignment]
    return default


async def _main(args: argparse.Namespace) -> None:
    text = args.config
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    data = json.loads(text) if text.strip() else {}
    for key in ("domains", "pages", "links", "size_fixed", "addresses", "address_skew"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    if args.tls:
        data["tls"] = True
    config = WebConfig.from_json(json.dumps(data))
    # the layout's addresses and --host, on one port (a wildcard --host covers them all)
    hosts = [args.host]
    if args.host not in ("", "0.0.0.0", "::"):
        hosts += [address for address in layout_addresses(config) if address != args.host]
    port, sockets = listen(hosts, args.port)
    plain_port, plain_sockets = listen(hosts) if config.tls and config.also_plain else (None, [])
    log = RequestLog(args.log)
    # the pages' schedules run on the log's clock, so the log's times place them
    site = Site(config, port, plain_port, ScheduleClock(lambda: log.now() / 1000, config.clock == "manual"))
    counters = Counters()
    context, ready = None, f"READY port={port}"
    if config.tls:
        ca_file = args.ca_file or Path(tempfile.mkdtemp(prefix="testweb-")) / "ca.pem"
        context = tls_context(config, ca_file)
        ready += f" ca={ca_file}"
    servers = [await serve(site, log, None, None, context, counters, sock=sock) for sock in sockets]
    if plain_port is not None:
        servers += [await serve(site, log, None, None, None, counters, sock=sock) for sock in plain_sockets]
        ready += f" plain={plain_port}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.2)
            log.flush()

    task = asyncio.create_task(flusher())
    print(ready, flush=True)
    print(
        f"test web on {config.scheme}://{args.host}:{port}/ serving {config.domains} domains "
        f"({config.domain(0)} ... {config.domain(config.domains - 1)}) "
        f"x {config.pages} pages"
        + (f", on {len(hosts) - 1} addresses {hosts[1]} ... {hosts[-1]} and {args.host}" if len(hosts) > 1 else ""),
        file=sys.stderr, flush=True,
    )
    await stop.wait()
    task.cancel()
    for each in servers:
        each.close()
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
