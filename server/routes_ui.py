"""The chat page: GET / and /chat serve server/static/index.html; /ui/* its scripts and styles.

No build step and no CDN: the files are served as they are in the
repository. The page itself needs no API key (it asks for one when the
server answers 401); every API call it makes carries the key like any client.
"""

from __future__ import annotations

from pathlib import Path

from quart import Blueprint, send_from_directory

STATIC_DIR = Path(__file__).resolve().parent / "static"
PAGE_PATHS = frozenset({"/", "/chat"})
ASSET_PREFIX = "/ui/"

bp = Blueprint("ui", __name__, static_folder=str(STATIC_DIR), static_url_path="/ui")


def is_public(path: str) -> bool:
    """The page and its files are public; the data behind them is not."""
    return path in PAGE_PATHS or path.startswith(ASSET_PREFIX)


@bp.get("/")
@bp.get("/chat")
async def chat_page():
    response = await send_from_directory(STATIC_DIR, "index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response
