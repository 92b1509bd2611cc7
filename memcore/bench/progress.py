"""Progress bars for the long phases of ``memcore bench`` (rich, on standard error)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

Progress = Callable[[str, int, int], None]
"""Called as ``progress(phase, done, total)`` after each step of a phase."""


def no_progress(phase: str, done: int, total: int) -> None:
    """A :data:`Progress` that shows nothing."""


class ProgressBars:
    """One rich progress bar per phase; shown only when standard error is a terminal."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bars = RichProgress(
            TextColumn("{task.description:<44}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not sys.stderr.isatty(),
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> ProgressBars:
        self._bars.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._bars.stop()

    def labelled(self, label: str) -> Progress:
        """A :data:`Progress` whose phases are shown as ``label: phase``."""

        def report(phase: str, done: int, total: int) -> None:
            name = f"{label}: {phase}"
            task = self._tasks.get(name)
            if task is None:
                task = self._tasks[name] = self._bars.add_task(name, total=total)
            self._bars.update(task, completed=done, total=total)

        return report
