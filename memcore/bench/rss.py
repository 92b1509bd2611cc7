"""Peak resident memory of a phase, native allocations included (Rust and C engines run in-process)."""

from __future__ import annotations

import os
import threading
from types import TracebackType

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float | None:
    """This process's resident memory in MiB, or ``None`` where ``/proc`` is not available."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return None


class PeakRss:
    """Samples the resident memory every ``interval`` seconds while the block runs.

    ``growth_mb`` is the peak seen minus the memory at entry: what the phase needed.
    """

    def __init__(self, interval: float = 0.02) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._start: float | None = None
        self._peak: float | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self._observe()

    def _observe(self) -> None:
        now = rss_mb()
        if now is not None and (self._peak is None or now > self._peak):
            self._peak = now

    def __enter__(self) -> PeakRss:
        self._start = rss_mb()
        self._peak = self._start
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._observe()

    @property
    def growth_mb(self) -> float | None:
        """Peak minus starting resident memory, in MiB (``None`` where it cannot be measured)."""
        if self._start is None or self._peak is None:
            return None
        return round(self._peak - self._start, 1)
