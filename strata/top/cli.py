"""`strata top`: refreshes the server view in place until Ctrl-C, or prints one (`--once`).

`--once` reads the server twice, `--interval` apart, so the printed snapshot
has rates too; its output is plain text when stdout is not a terminal. The
live view keeps retrying when the server stops answering (a restart); the
first reading must succeed.
"""

from __future__ import annotations

import argparse
import sys
import time

import httpx

from .snapshot import Rates, ScrapeError, read

DESCRIPTION = ("A live view of a running Strata server: slots (state, request, prefill progress, tokens, "
               "tokens/s), queue, aggregate tokens/s, TTFT and inter-token latency percentiles, KV cache use.")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from strata import env

    parser.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL (default: http://127.0.0.1:8080)")
    parser.add_argument("--api-key", default=env.get("STRATA_API_KEY"),
                        help="sent as 'Authorization: Bearer KEY' (default: $STRATA_API_KEY)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default: 1)")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit (for scripts)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from .view import render

    if args.interval <= 0:
        print("error: --interval must be positive", file=sys.stderr)
        return 2
    url = args.url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    console = Console()
    with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
        try:
            previous = read(http)
            if args.once:
                time.sleep(args.interval)
                current = read(http)
                console.print(render(url, current, Rates.between(previous, current)))
                return 0
            with Live(render(url, previous, None), console=console, auto_refresh=False, screen=False) as live:
                while True:
                    time.sleep(args.interval)
                    try:
                        current = read(http)
                    except ScrapeError as exc:     # a restart or a blip: keep watching
                        live.update(Text(f"{exc}; retrying every {args.interval:g} s", style="red"), refresh=True)
                        previous = None
                        continue
                    rates = Rates.between(previous, current) if previous else None
                    live.update(render(url, current, rates), refresh=True)
                    previous = current
        except ScrapeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
