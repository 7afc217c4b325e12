"""A progress bar on stderr for long work (loading weights to the device, unpacking a model).

Drawn with rich (as `strata top` is) and only when stderr is a terminal: logs,
pipes and CI get nothing from it, the one-line log messages around the work
say what happened. Silent for work below `min_total`.
"""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, label: str, total: int, unit: str = "MB", scale: float = 1e6,
                 min_total: int = 32_000_000, stream=None):
        self.label = label
        self.total = max(int(total), 1)
        self.unit = unit
        self.scale = scale
        self.stream = stream or sys.stderr
        self.done = 0
        self.enabled = total >= min_total and _is_terminal(self.stream)
        self._bar = None
        if self.enabled:
            self._start()

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress as Bar, TextColumn, TimeRemainingColumn

        console = Console(file=self.stream)
        columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%")]
        if self.unit == "MB":
            columns.append(DownloadColumn(binary_units=False))
        columns.append(TimeRemainingColumn())
        self._bar = Bar(*columns, console=console, transient=False)
        self._task = self._bar.add_task(self.label, total=self.total)
        self._bar.start()

    def advance(self, amount: int) -> None:
        self.done = min(self.total, self.done + int(amount))
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
