"""`strata serve`: load the model, then serve the Quart app with hypercorn until SIGINT/SIGTERM.

The engine is created before the event loop starts (loading blocks for
seconds), and its loop runs as a background task of the app. The first
SIGINT or SIGTERM starts draining (server/drain.py): /health and new requests
get 503, the requests in flight run on for up to --drain-timeout seconds.
Then, or at a second signal, every stream still running ends with a final
event and `[DONE]` and hypercorn closes the connections; a third signal stops
at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from strata import env
from strata.config import ConfigError, EngineConfig
from strata.engine.engine import Engine

from . import h11_errors
from .app import create_app
from .drain import drain
from .settings import ServerSettings
from .state import ServerState

log = logging.getLogger("strata.server")

GRACEFUL_TIMEOUT_S = 5.0        # for connections to finish once their streams have ended


def serve(args, engine_config: EngineConfig) -> int:
    level = (args.log_level or env.get("STRATA_LOG_LEVEL") or "info").upper()
    logging.basicConfig(level=getattr(logging, level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    drain_timeout = getattr(args, "drain_timeout", 0.0)
    if not drain_timeout >= 0:          # before the model loads: a typo costs no seconds
        print(f"error: --drain-timeout must be 0 or more seconds, not {drain_timeout}", file=sys.stderr)
        return 2
    try:
        engine_config.check()
        engine = Engine.create(engine_config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:       # model files, devices: say what failed
        if log.isEnabledFor(logging.DEBUG):
            raise
        print(f"error: could not load {engine_config.model!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    settings = ServerSettings.from_args(args, engine_config.model)
    try:
        settings.media_limits
    except ValueError as exc:
        engine.close()
        print(f"error: --media-dir: {exc}", file=sys.stderr)
        return 2
    _log_start(engine, settings, args)
    h11_errors.install()
    app = create_app(engine, settings)
    try:
        asyncio.run(_serve(app, app.extensions["strata"], _hypercorn_config(args)))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.close()
    log.info("stopped")
    return 0


async def _serve(app, state: ServerState, config: HypercornConfig) -> None:
    stop, now = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not stop.is_set():
            log.info("%s received: shutting down (send it again to end the requests in flight now)", name)
            stop.set()
            return
        log.info("%s received again: ending the requests in flight (a third signal stops at once)", name)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)      # a third signal takes the default action
        now.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)

    async def shutdown_trigger() -> None:
        await stop.wait()
        await drain(state, state.settings.drain_timeout_s, now)
        await state.begin_shutdown()

    announce = asyncio.create_task(_announce_when_listening(config.bind[0]))
    try:
        await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger)
    finally:
        announce.cancel()


async def _announce_when_listening(bind: str) -> None:
    """Prints the one "ready" line, with the chat page's URL, once the port accepts connections."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    probe = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    while True:
        try:
            _, writer = await asyncio.open_connection(probe, int(port))
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        break
    shown = f"[{probe}]" if ":" in probe else probe
    everywhere = " (listening on all interfaces)" if probe != host else ""
    print(f"strata serve: ready — chat at http://{shown}:{port}/ , OpenAI API at http://{shown}:{port}/v1"
          f"{everywhere}", flush=True)


def _hypercorn_config(args) -> HypercornConfig:
    config = HypercornConfig()
    host = f"[{args.host}]" if ":" in args.host else args.host
    config.bind = [f"{host}:{args.port}"]
    config.graceful_timeout = GRACEFUL_TIMEOUT_S
    config.errorlog = logging.getLogger("hypercorn.error")
    config.accesslog = logging.getLogger("strata.access") if log.isEnabledFor(logging.DEBUG) else None
    return config


def _log_start(engine: Engine, settings: ServerSettings, args) -> None:
    cfg, spec = engine.config, engine.model.spec
    log.info("model %s: %s (%s, %d layers, vocab %d)", settings.model_name, engine.model.path, spec.arch,
             spec.n_layers, spec.vocab)
    log.info("backend %s: %d slots x %d tokens, prefill chunk %d, queue bound %d, graphs %s",
             cfg.device, cfg.batch, cfg.ctx, cfg.chunk, cfg.max_queue, "on" if cfg.graphs else "off")
    host = engine.pool.host
    log.info("prefix cache %s%s%s", "on" if engine.pool.cache_on else "off",
             f"; host tier up to {cfg.host_cache:g} GiB ({host.capacity} pages, {'pinned' if cfg.device != 'cpu' else 'plain'})"
             if host is not None else "",
             f"; slot files in {settings.slot_save_path}" if settings.slot_save_path else "")
    if cfg.devices:
        log.info("layer split over %s at layers %s (%s)", ",".join(cfg.devices),
                 ",".join(map(str, getattr(engine.model.decoder, "boundaries", ()))),
                 f"{cfg.batch_groups} batch groups pipelined, eager steps" if cfg.batch_groups > 1
                 else "decode graphs per stage" if cfg.graphs else "eager steps")
    if cfg.draft:
        log.info("speculative decoding: %s drafts, at most %d per request and step%s", cfg.draft, cfg.draft_max,
                 f" (draft model {cfg.draft_model})" if cfg.draft_model else "")
    log.info("API key %s; listening on http://%s:%d", "required" if settings.api_key else "not required",
             args.host, args.port)
    if not settings.api_key and args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without an API key: anyone who can reach this address can use it "
                    "(set --api-key or STRATA_API_KEY)", args.host)
