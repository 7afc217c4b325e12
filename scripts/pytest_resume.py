"""pytest plugin: run one test suite to its end across several device calls.

A device call has a time limit (docs/gpu.md), and the whole GPU suite plus the build does not fit one. With
`-p pytest_resume` (scripts/ on PYTHONPATH) and STRATA_RESUME_FILE set, every test that passes or fails
(in its call or its set-up) appends its node id to that file as soon as it ends, so a call cut off by its time
guard keeps what it ran; the next call with the same file deselects those ids and runs the rest. Skipped tests
are not recorded: one that skipped for want of something a later call carries (the default model) runs there. The file lives on
the device machine (/tmp survives while the machine stays warm); delete it to start over.
"""

from __future__ import annotations

import os
from pathlib import Path

_done: set[str] = set()
_path: Path | None = None


def pytest_configure(config):
    global _path
    name = os.environ.get("STRATA_RESUME_FILE", "")
    if not name:
        return
    _path = Path(name)
    if _path.exists():
        _done.update(line.strip() for line in _path.read_text().splitlines() if line.strip())


def pytest_collection_modifyitems(config, items):
    if not _done:
        return
    keep = [item for item in items if item.nodeid not in _done]
    dropped = [item for item in items if item.nodeid in _done]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_runtest_logreport(report):
    # One line per test that passed or failed: its call phase, or the setup phase when that failed.
    if _path is None or report.skipped:
        return
    if report.when == "call" or (report.when == "setup" and report.failed):
        with _path.open("a") as f:
            f.write(report.nodeid + "\n")
