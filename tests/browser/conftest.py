"""Fixtures of the browser tests: headless Chromium (Debian's /usr/bin/chromium) driven by Playwright,
and Strata servers started as in production (tests/server/server_helpers.py).

Playwright's own browser download needs a host CI can't reach, so the tests
use the distribution's Chromium; `make test` installs it (apt-get chromium)
where it can. Without Playwright or Chromium the tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))   # server_helpers, as tests/server does

from server_helpers import MODEL, start_server  # noqa: E402

from strata.model_store import ModelStoreError, resolve_model  # noqa: E402

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
REPO = Path(__file__).resolve().parents[2]
# The server must run this checkout's code (its static files), even from a virtualenv installed elsewhere.
SERVER_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def chromium_path() -> str | None:
    for path in CHROMIUM_PATHS:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromium")


# Module scope, not session: Playwright's sync API keeps an event loop running in the main thread while it
# is open, which would break asyncio tests that run after the browser tests in the same session.
@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                                   "(pip install -e '.[test]')")
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium at /usr/bin/chromium: install it with `apt-get install chromium` "
                    "(make test does when it runs as root)")
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: CI and these machines run as root, where Chromium's sandbox refuses to start.
        chromium = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    page = context.new_page()
    page.set_default_timeout(120_000)       # answers on a 2-core CPU take seconds
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture(scope="session")
def model_available():
    try:
        resolve_model(MODEL)
    except ModelStoreError as exc:
        pytest.skip(f"the default model is not in the cache ({exc}); run `make model`")


@pytest.fixture(scope="session")
def chat_server(model_available, tmp_path_factory):
    """The default model, 4 slots."""
    server = start_server(tmp_path_factory.mktemp("chat_server"), "--batch", "4", "--chunk", "32",
                          env=SERVER_ENV)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def key_server(model_available, tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("key_server"), "--batch", "1", api_key="browser-key-42",
                          env=SERVER_ENV)
    yield server
    server.stop()
