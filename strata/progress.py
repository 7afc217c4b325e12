"""A small progress line for long work (model loading, conversion) on stderr.

On a terminal it redraws one line; elsewhere (logs, CI) it prints a line at
most every 10 % so logs stay short. Silent for work below `min_total`.
"""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, total: int, unit: str = "MB", scale: float = 1e6,
                 min_total: int = 32_000_000, stream=None):
        self.label = label
        self.total = max(int(total), 1)
        self.unit = unit
        self.scale = scale
        self.stream = stream or sys.stderr
        self.enabled = total >= min_total
        self.tty = self.enabled and getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self.start = time.monotonic()
        self._last_decile = -1

    def advance(self, amount: int) -> None:
        self.done = min(self.total, self.done + int(amount))
        if not self.enabled:
            return
        decile = self.done * 10 // self.total
        if self.tty:
            self._write("\r" + self._line(), end="")
        elif decile != self._last_decile:
            self._write(self._line())
        self._last_decile = decile

    def close(self) -> None:
        if self.enabled and self.tty:
            self._write("\r" + self._line() + f" in {time.monotonic() - self.start:.1f}s")

    def _line(self) -> str:
        pct = 100 * self.done // self.total
        return (f"{self.label}: {pct:3d}% ({self.done / self.scale:,.0f}/{self.total / self.scale:,.0f} "
                f"{self.unit})")

    def _write(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.stream, flush=True)
