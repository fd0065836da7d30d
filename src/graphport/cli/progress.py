"""Progress on a terminal, silence elsewhere: long commands show they are alive (tqdm bars
for the stages graphport reports, a status line between them) without putting control
characters into pipes, log files or CI output."""
from __future__ import annotations

import os
import sys
from typing import TextIO


def shows_progress(stream: TextIO) -> bool:
    """A terminal, and not CI (whose logs are terminals to some runners)."""
    return stream.isatty() and not os.environ.get("CI")


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = shows_progress(self.stream)
        self._bar = None
        self._stage = None

    def status(self, text: str) -> None:
        """One line saying what is happening now (exporting, saving)."""
        if self.enabled:
            self._open(None, f"{self.label}: {text}")

    def __call__(self, done: int, total: int) -> None:
        """`graphport.check`'s progress callback: samples done of total."""
        self.listener(self.label, done, total)

    def listener(self, stage: str, done: int, total: int) -> None:
        """graphport.on_progress's callback: a bar per stage (export, capture, ...)."""
        if not self.enabled:
            return
        if self._bar is None or self._stage != stage or self._bar.total != total:
            self._open(total, f"{self.label}: {stage}")
            self._stage = stage
        self._bar.n = done
        self._bar.refresh()

    def _open(self, total: int | None, description: str) -> None:
        from tqdm import tqdm
        self.close()
        self._stage = None
        self._bar = tqdm(total=total, desc=description, file=self.stream, leave=False, dynamic_ncols=True,
                         bar_format=None if total else "{desc}")
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
