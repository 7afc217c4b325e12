"""Slot files: a slot's cached prefix saved to disk and restored into the prefix cache.

This is llama-server's `POST /slots/{id}?action=save|restore`. `save` writes
the tokens of the slot's request (the running one, else the last one it
served) together with their full pages from the prefix cache (docs/kv_pool.md),
whichever tier holds them: the device pool or the host tier (`--host-cache`).
`restore` reads such a file back into the prefix cache on the device, so the
next request whose prompt starts with those tokens maps the pages. That
request may run in any slot: pages are shared, and only the file's tokens
and salts decide a hit.

A restored page holds the bytes a prefill of its tokens writes, so a hit on
it is exact. Pages of image requests carry their salts (page_salt.py: the
positions and image embedding rows they hold), so a restored image page only
ever serves a prompt with the same image at the same place. The file records
the model's file name, its size, its shape and the backend that computed the
pages (CPU and CUDA bits differ); a file written for another model or backend
is refused. File names are validated and resolved under the save directory
only.

Format: MAGIC, an 8-byte little-endian header length, the JSON header, then
the pages' bytes in order (the pool's page layout, docs/kv_pool.md). Version
2 added the header's "salts" (one hex digest or null per page) and
"backend"; version 1 files (text pages only) are still read.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

from ..config import PAGE_CELLS

MAGIC = b"STRATA-KV-PAGES-2\n"
MAGIC_V1 = b"STRATA-KV-PAGES-1\n"          # no salts, no backend: plain text pages
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_HEADER = 64 << 20


class SlotFileError(ValueError):
    """A save or restore that cannot be done; status is the HTTP status it maps to, param the field."""

    def __init__(self, message: str, status: int = 400, param: str | None = "filename"):
        super().__init__(message)
        self.status, self.param = status, param


def resolve(directory: str | os.PathLike | None, filename: str) -> Path:
    """The file `filename` names inside `directory`; SlotFileError for a bad name or no directory."""
    if directory is None:
        raise SlotFileError("slot files are off: start the server with --slot-save-path DIR", 400, None)
    if not isinstance(filename, str) or not NAME.fullmatch(filename) or ".." in filename:
        raise SlotFileError("filename must be 1-128 letters, digits, '.', '_' or '-', start with a letter or digit "
                            f"and contain no '..'; got {filename!r}")
    return Path(directory) / filename


def _identity(engine) -> dict:
    spec, path = engine.model.spec, Path(engine.model.path)
    size = path.stat().st_size if path.is_file() else 0
    return {"model": path.name, "model_bytes": size, "n_layers": spec.n_layers, "n_kv_heads": spec.n_kv_heads,
            "head_dim": spec.head_dim, "vocab": spec.vocab, "page_cells": PAGE_CELLS,
            "page_bytes": engine.runner.slots.page_bytes(), "backend": engine.ctx.info().backend.name}


def _slot_tokens(engine, slot: int) -> tuple[list[int], list]:
    """The computed tokens of the slot's request (running, else the last it served) and their pages' salts."""
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < engine.config.batch:
        raise SlotFileError(f"slot {slot!r} does not exist; slots are 0..{engine.config.batch - 1}", 400, "id_slot")
    running = engine.scheduler.running.get(slot)
    if running is not None:
        tokens = (running.prompt_ids + running.output_ids)[:running.num_computed]
        return tokens, engine.pool.salts(running, len(tokens) // PAGE_CELLS)
    return list(engine.last_tokens.get(slot, [])), list(engine.last_salts.get(slot, []))


async def save(engine, slot: int, path: Path) -> dict:
    """Writes the slot's cached full pages (device or host tier) and their tokens to `path`;
    {"n_saved": tokens, "n_written": bytes}."""
    pool = engine.pool
    entries = pool.chain(*_slot_tokens(engine, slot), host=True)
    if not entries:
        raise SlotFileError(f"slot {slot} holds no cached page of {PAGE_CELLS} tokens to save (prompts shorter "
                            "than a page, caching off, or evicted since)", 400, "id_slot")
    tokens = [t for _, e in entries for t in e.tokens]
    salts = [None if e.salt is None else e.salt.hex() for _, e in entries]
    header = json.dumps({**_identity(engine), "tokens": tokens, "salts": salts}).encode()
    pool.hold(entries)      # device pages are not evicted, host pages' buffers not reused, until the file is written
    try:
        def write() -> int:
            slots = engine.runner.slots
            tmp = path.with_name(path.name + ".partial")
            with open(tmp, "wb") as f:
                f.write(MAGIC + struct.pack("<Q", len(header)) + header)
                for _, entry in entries:
                    held = getattr(entry, "buffer", None)        # a HostPage (host_cache.py)
                    f.write(held.array.tobytes() if held is not None else slots.read_page(entry.page))
            os.replace(tmp, path)
            return path.stat().st_size
        n_written = await engine.run_on_device(write)
    except OSError as exc:
        raise SlotFileError(f"could not write {path.name}: {exc.strerror or exc}", 500) from None
    finally:
        pool.unhold(entries)
    return {"n_saved": len(tokens), "n_written": n_written}


def _read(path: Path, identity: dict) -> tuple[list[int], list[bytes | None], list[bytes]]:
    try:
        with open(path, "rb") as f:
            magic = f.read(len(MAGIC))
            if magic not in (MAGIC, MAGIC_V1):
                raise SlotFileError(f"{path.name} is not a Strata slot file")
            (n,) = struct.unpack("<Q", f.read(8).ljust(8, b"\0"))
            if n > MAX_HEADER:
                raise SlotFileError(f"{path.name} has a header of {n} bytes; at most {MAX_HEADER}")
            header = json.loads(f.read(n))
            if not isinstance(header, dict):
                raise SlotFileError(f"{path.name} has a malformed header: not a JSON object")
            if magic == MAGIC_V1:       # written before salts and backends were recorded: text pages only
                header = {"backend": identity["backend"], **header, "salts": None}
            got = {k: header.get(k) for k in identity}
            if got != identity:
                diff = ", ".join(f"{k}: file {got[k]!r}, server {identity[k]!r}" for k in identity if got[k] != identity[k])
                raise SlotFileError(f"{path.name} was saved for another model or layout ({diff})")
            tokens = header.get("tokens")
            vocab, size = identity["vocab"], identity["page_bytes"]
            if not isinstance(tokens, list) or not tokens or len(tokens) % PAGE_CELLS or not all(
                    isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens):
                raise SlotFileError(f"{path.name}: tokens must be a non-empty list of ids in [0, {vocab}) "
                                    f"filling whole pages of {PAGE_CELLS}")
            salts = _salts(header.get("salts"), len(tokens) // PAGE_CELLS, path.name)
            pages = [f.read(size) for _ in range(len(tokens) // PAGE_CELLS)]
            if any(len(p) != size for p in pages) or f.read(1):
                raise SlotFileError(f"{path.name} is truncated or has trailing bytes")
            return tokens, salts, pages
    except FileNotFoundError:
        raise SlotFileError(f"no slot file named {path.name}", 404) from None
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, SlotFileError):
            raise
        raise SlotFileError(f"{path.name} has a malformed header: {exc}") from None
    except OSError as exc:
        raise SlotFileError(f"could not read {path.name}: {exc.strerror or exc}", 500) from None


def _salts(raw, n_pages: int, name: str) -> list[bytes | None]:
    """The header's salts: one 32-digit hex digest or null per page (None: all plain text pages)."""
    if raw is None:
        return [None] * n_pages
    if not isinstance(raw, list) or len(raw) != n_pages or not all(
            s is None or (isinstance(s, str) and re.fullmatch(r"[0-9a-f]{32}", s)) for s in raw):
        raise SlotFileError(f"{name}: salts must be a list of {n_pages} 32-digit hex digests or nulls, one a page")
    return [None if s is None else bytes.fromhex(s) for s in raw]


async def restore(engine, slot: int, path: Path) -> dict:
    """Reads `path` into the prefix cache; {"n_restored": tokens, "n_read": bytes}."""
    _slot_tokens(engine, slot)                      # the slot id is checked like save's
    if not engine.pool.cache_on:
        raise SlotFileError("the prefix cache is off (--no-prefix-cache or --draft mtp): nothing could use "
                            "a restored prefix", 400, None)
    identity = _identity(engine)
    tokens, salts, data = await engine.run_on_device(_read, path, identity)
    pool = engine.pool
    known = pool.chain(tokens, salts)               # pages of the file already on the device: kept, not rewritten
    pages = pool.take(len(data) - len(known))
    if pages is None:
        raise SlotFileError(f"the KV pool has {pool.num_free} free pages; the file needs {len(data) - len(known)}",
                            503, None)
    pool.hold(known)
    try:
        def write() -> None:
            for page, blob in zip(pages, data[len(known):]):
                engine.runner.slots.write_page(page, blob)
        await engine.run_on_device(write)
    except BaseException:
        pool.give_back(pages)
        raise
    finally:
        pool.unhold(known)
    pool.insert(tokens, pages, first=len(known), salts=salts)
    return {"n_restored": len(tokens), "n_read": path.stat().st_size}
