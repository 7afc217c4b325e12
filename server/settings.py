"""ServerSettings: what the HTTP layer needs to know beyond the engine.

Built once from the `strata serve` flags (environment variables only through
strata.env), then read by every route. The engine's own settings live in
strata.config.EngineConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from strata import env
from strata.vision.media import MediaLimits


@dataclass(frozen=True)
class ServerSettings:
    model_name: str                      # the id clients send as "model" and /v1/models lists
    api_key: str | None = None           # None: no key required
    retry_after_s: int = 1               # Retry-After on a full queue
    media_dir: str | None = None         # where image_url file paths may read from (vision)
    allow_remote_media: bool = False     # whether image_url may fetch http(s) (vision)
    reasoning_format: str = "split"      # split: <think>...</think> into reasoning_content; none: left in content
    sse_ping_interval: float | None = 15.0   # seconds of silence before an SSE ': ping' comment; None = never
    cors_origins: tuple[str, ...] = ()   # origins allowed by CORS ('*' = any); empty: no CORS headers
    allow_private_media: bool = False    # whether those fetches may reach non-public addresses
    drain_timeout_s: float = 30.0        # SIGTERM: seconds requests in flight may still run (server/drain.py)
    slot_save_path: str | None = None    # directory of POST /slots/{id}?action=save|restore files; None = off

    @classmethod
    def from_args(cls, args, model: str) -> "ServerSettings":
        """Flags first, then STRATA_* variables; `model` is the --model value or the default alias."""
        api_key = args.api_key if args.api_key is not None else env.get("STRATA_API_KEY")
        media_dir = getattr(args, "media_dir", None) or env.get("STRATA_MEDIA_DIR")
        remote = bool(getattr(args, "allow_remote_media", False)) or env.get("STRATA_ALLOW_REMOTE_MEDIA") == "1"
        private = bool(getattr(args, "allow_private_media", False)) or env.get("STRATA_ALLOW_PRIVATE_MEDIA") == "1"
        ping = getattr(args, "sse_ping_interval", 15.0)
        return cls(model_name=args.served_model_name or model, api_key=api_key or None,
                   media_dir=media_dir, allow_remote_media=remote, allow_private_media=private,
                   reasoning_format=getattr(args, "reasoning_format", "split"),
                   sse_ping_interval=ping if ping and ping > 0 else None,
                   cors_origins=tuple(getattr(args, "cors_origin", None) or ()),
                   drain_timeout_s=float(getattr(args, "drain_timeout", 30.0)),
                   slot_save_path=getattr(args, "slot_save_path", None))

    @cached_property
    def media_limits(self) -> MediaLimits:
        """Where chat images may come from; ValueError for a --media-dir that is not a directory."""
        return MediaLimits(media_dir=self.media_dir, allow_remote=self.allow_remote_media,
                           allow_private=self.allow_private_media)
