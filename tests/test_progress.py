"""The progress bar (strata/progress.py): drawn on a terminal, silent elsewhere and for small work."""

from __future__ import annotations

import io

from strata.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal():
    stream = Terminal()
    with Progress("loading weights", 100_000_000, stream=stream) as bar:
        for _ in range(4):
            bar.advance(25_000_000)
    out = stream.getvalue()
    assert bar.enabled and bar.done == 100_000_000
    assert "loading weights" in out and "100%" in out and "100.0 MB" in out


def test_silent_off_a_terminal_and_for_small_work():
    pipe = io.StringIO()
    with Progress("loading weights", 100_000_000, stream=pipe) as bar:
        bar.advance(100_000_000)
    assert not bar.enabled and pipe.getvalue() == ""
    stream = Terminal()
    with Progress("tiny", 1000, stream=stream) as bar:
        bar.advance(1000)
    assert not bar.enabled and stream.getvalue() == ""
