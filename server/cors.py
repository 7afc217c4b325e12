"""CORS for browsers calling the API from other origins: off unless --cors-origin names origins.

With origins configured, a request whose Origin is allowed ('*' allows any)
gets Access-Control-Allow-Origin (and Vary: Origin) on its response, and a
preflight (OPTIONS with Access-Control-Request-Method) is answered here with
204 and the allowed methods and headers, before the API key check: browsers
send preflights without credentials. Other origins get no CORS headers, so
the browser refuses the response; the server itself answers as usual.
"""

from __future__ import annotations

from quart import Quart, Response, request

ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, OpenAI-Organization, OpenAI-Project, X-Stainless-Lang, " \
                "X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, X-Stainless-Runtime, " \
                "X-Stainless-Runtime-Version, X-Stainless-Retry-Count, X-Stainless-Timeout"
MAX_AGE_S = "600"


def install(app: Quart, origins: tuple[str, ...]) -> None:
    """Registers the preflight handler (first among before_request) and the response headers."""
    if not origins:
        return
    allowed = frozenset(origins)

    def allow_origin() -> str | None:
        origin = request.headers.get("Origin")
        if origin is None:
            return None
        if "*" in allowed:
            return "*"
        return origin if origin in allowed else None

    async def preflight():
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        origin = allow_origin()
        response = Response("", status=204)
        if origin is not None:
            requested = request.headers.get("Access-Control-Request-Headers")
            response.headers.update({"Access-Control-Allow-Origin": origin, "Vary": "Origin",
                                     "Access-Control-Allow-Methods": ALLOW_METHODS,
                                     "Access-Control-Allow-Headers": requested or ALLOW_HEADERS,
                                     "Access-Control-Max-Age": MAX_AGE_S})
        return response

    async def add_headers(response):
        origin = allow_origin()
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
        return response

    app.before_request_funcs.setdefault(None, []).insert(0, preflight)
    app.after_request(add_headers)
