"""Fixtures of the HTTP tests: servers started as in production (see server_helpers).

Session-scoped servers are shared (tests read metric deltas, never absolute
counts); a test that kills its server starts its own with `start_server`.
Slots, context and token counts are small so the suite stays fast on 2 cores.
"""

from __future__ import annotations

import pytest
from server_helpers import start_server


@pytest.fixture(scope="session")
def model_available(model_path):
    """The servers serve the default model: skip unless it is in the cache (tests/conftest.py's model_path)."""
    return model_path


def _session_server(tmp_path_factory, *flags, api_key=None):
    server = start_server(tmp_path_factory.mktemp("server"), *flags, api_key=api_key)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server(model_available, tmp_path_factory):
    """The main server: 4 slots of 512 tokens, prefill chunk 32 (long prompts take several steps)."""
    yield from _session_server(tmp_path_factory, "--batch", "4", "--chunk", "32")


@pytest.fixture(scope="session")
def key_server(model_available, tmp_path_factory):
    """A server that requires an API key."""
    yield from _session_server(tmp_path_factory, "--batch", "1", api_key="test-key-123")


@pytest.fixture(scope="session")
def tiny_server(model_available, tmp_path_factory):
    """One slot and no queue: a second request while one runs gets 503. Served as 'tiny'."""
    yield from _session_server(tmp_path_factory, "--batch", "1", "--max-queue", "0", "--served-model-name", "tiny")


@pytest.fixture(scope="session")
def api_server(model_available, tmp_path_factory):
    """Structured output, tools, n, penalties: 4 slots, SSE pings after 50 ms of silence, CORS for one origin."""
    yield from _session_server(tmp_path_factory, "--batch", "4", "--chunk", "32", "--sse-ping-interval", "0.05",
                               "--cors-origin", "http://allowed.test")


@pytest.fixture
def http(server):
    with server.http() as client:
        yield client
