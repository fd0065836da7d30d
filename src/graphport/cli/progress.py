"""A progress bar on a terminal, silence in a pipe: long commands show they are alive
without putting control characters into logs."""
from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._shown = False

    def status(self, text: str) -> None:
        """One line saying what is happening now (exporting, saving)."""
        if self.enabled:
            self.stream.write(f"\r\033[K{self.label}: {text}")
            self.stream.flush()
            self._shown = True

    def __call__(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        self.status(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False
