"""Draws a Snapshot (and the rates since the previous one) as rich tables: the server, then one row per slot."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .snapshot import Rates, Snapshot

STATE_STYLE = {"idle": "dim", "prefill": "yellow", "decode": "green"}


def render(url: str, snapshot: Snapshot, rates: Rates | None) -> Group:
    return Group(_summary(url, snapshot, rates), _slots(snapshot))


def _summary(url: str, snap: Snapshot, rates: Rates | None) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    slots = snap.slots
    held, capacity = snap.kv_used
    kv = f"{held:,}/{capacity:,} tokens ({100 * held / capacity:.1f}%)" if capacity else f"{held:,} tokens"
    up = "up" if snap.value("strata_engine_up") else "STOPPED"
    table.add_row("server", f"{url} · engine {up}")
    table.add_row("slots", f"{slots['busy_slots']}/{slots['num_slots']} busy · {slots['queue_len']} queued · KV {kv}")
    if rates is None:
        table.add_row("speed", "(after the next refresh)")
    else:
        table.add_row("speed", f"{rates.generated_per_s:,.1f} tokens/s generated (last {rates.seconds:.1f} s)")
    table.add_row("latency", f"TTFT p50/p99 {_pair(snap, 'strata_time_to_first_token_seconds')} · "
                             f"ITL p50/p99 {_pair(snap, 'strata_inter_token_latency_seconds')}")
    done = {o: int(snap.value("strata_requests_total", outcome=o)) for o in ("stop", "length", "cancelled")}
    failed = int(sum(snap.value("strata_requests_total", outcome=o)
                     for o in ("error", "rejected", "invalid", "unauthorized")))
    table.add_row("requests", f"{done['stop'] + done['length']:,} finished · {done['cancelled']:,} cancelled · "
                              f"{failed:,} refused or failed · "
                              f"{int(snap.total('strata_generation_tokens_total')):,} tokens generated")
    return table


def _pair(snap: Snapshot, histogram: str) -> str:
    values = [snap.quantile(histogram, q) for q in (0.5, 0.99)]
    if values[0] is None:
        return "-"
    return "/".join(f"{v * 1000:,.0f}" for v in values) + " ms"


def _slots(snap: Snapshot) -> Table:
    table = Table(title=None, expand=False, header_style="bold")
    for name, justify in (("slot", "right"), ("state", "left"), ("request", "left"), ("prefill", "right"),
                          ("generated", "right"), ("tokens/s", "right"), ("KV", "right")):
        table.add_column(name, justify=justify)
    for slot in snap.slots["slots"]:
        state = slot["state"]
        if state == "idle":
            table.add_row(str(slot["id"]), Text(state, style=STATE_STYLE[state]), "", "", "", "", "")
            continue
        prompt, cached = slot["prompt_tokens"], slot["cached_tokens"]
        prefill = f"{min(cached, prompt)}/{prompt}" + (f" ({100 * min(cached, prompt) // prompt}%)" if prompt else "")
        rate = slot.get("tokens_per_s")
        table.add_row(str(slot["id"]), Text(state, style=STATE_STYLE.get(state, "")), slot["request_id"], prefill,
                      str(slot["generated_tokens"]), "-" if rate is None else f"{rate:,.1f}", f"{cached:,}")
    return table
