"""A free-space watermark for the embedded engine, checked before every write.

Qdrant Edge memory-maps its files and creates many of them sparse: a fresh shard's two 32 MiB
WAL segments and its segment files are about 195 MiB long and take no block on disk. When a
write touches a page of such a file and the filesystem has no block left to give it, the kernel
kills the process with ``SIGBUS``; no error ever reaches Python (reproduced on an 8 MiB tmpfs:
the first write killed the process). So, as Elasticsearch refuses writes at its flood-stage disk
watermark, :class:`Watermark` refuses a write before it reaches the engine unless the store's
filesystem has room for

* every byte the store's files could still claim without growing (their holes: apparent size
  minus allocated blocks),
* plus :data:`BATCH_FACTOR` times an estimate of what the write adds,
* plus :data:`MARGIN_BYTES` for what the engine allocates on its own (a new WAL segment, grown
  segment files).

The refusal is :class:`~memcore.errors.StoreFullError`; nothing of the refused write is
stored, and reads go on. Measuring the holes walks every file of the store (~9 ms for a shard of
a few thousand points), so it is done at the first write, every :data:`REMEASURE_EVERY` writes
(:data:`ROOMY_REMEASURE_EVERY` while free space is :data:`ROOMY` times the requirement or more),
and whenever free space comes within twice the requirement; otherwise a write costs one ``statvfs``.
"""

from __future__ import annotations

import os
from pathlib import Path

from memcore.errors import StoreFullError

MARGIN_BYTES = 64 * 2**20
"""Room kept free beyond the holes and the write itself: two of Qdrant Edge's 32 MiB WAL segments."""

BATCH_FACTOR = 4
"""A record is written to the WAL and to its segment, with payload indexes: four times its estimate."""

REMEASURE_EVERY = 64
"""The holes are measured again at least this often (in writes)."""

ROOMY = 16
"""Free space this many times the requirement or more is roomy: the holes could not grow into
it within :data:`ROOMY_REMEASURE_EVERY` writes."""

ROOMY_REMEASURE_EVERY = 1_024
"""The holes are measured again at least this often (in writes) while free space is roomy: at 64,
the walk was 7 % of an agent's write."""

FRESH_SHARD_BYTES = 256 * 2**20
"""What a new, empty shard may claim once written to (a fresh one's files are about 195 MiB long)."""


def unbacked_bytes(root: Path) -> int:
    """How many bytes the files under ``root`` could claim without growing: their holes."""
    holes = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            holes += max(0, info.st_size - info.st_blocks * 512)
    return holes


def allocated_bytes(root: Path) -> int:
    """The blocks the files under ``root`` take on disk."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def free_bytes(root: Path) -> int:
    """Free space on ``root``'s filesystem for an unprivileged process (root's reserve excluded)."""
    stats = os.statvfs(root)
    return stats.f_bavail * stats.f_frsize


class Watermark:
    """Refuses writes to the store under ``root`` that could exhaust its filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._holes: int | None = None
        self._writes_since_measured = 0

    def check(self, action: str, adds: int = 0, *, factor: int = BATCH_FACTOR) -> None:
        """Before a write that adds about ``adds`` bytes (``factor`` times that on disk).

        :raises StoreFullError: if the filesystem lacks the room (see the module).
        """
        free = free_bytes(self.root)
        required = self._required(factor * adds)
        every = ROOMY_REMEASURE_EVERY if free >= ROOMY * required else REMEASURE_EVERY
        if self._holes is None or self._writes_since_measured >= every or free < 2 * required:
            self._holes = unbacked_bytes(self.root)
            self._writes_since_measured = 0
            required = self._required(factor * adds)
        self._writes_since_measured += 1
        if free < required:
            raise StoreFullError(
                f"refused to {action}: the filesystem of the Qdrant store at {self.root} has "
                f"{free / 2**20:.0f} MiB free, and this write needs {required / 2**20:.0f} MiB "
                f"({(self._holes or 0) / 2**20:.0f} MiB for the engine's preallocated files, "
                f"{factor * adds / 2**20:.1f} MiB for the write, {MARGIN_BYTES // 2**20} MiB margin). "
                "Qdrant Edge memory-maps its files and would be killed by SIGBUS on a full disk; "
                "nothing was written, and reads still work. Free space on that filesystem and retry"
            )

    def _required(self, written: int) -> int:
        return (self._holes or 0) + written + MARGIN_BYTES


def estimated_bytes(payload_bytes: int, points: int, dimension: int | None) -> int:
    """What an upsert of ``points`` points adds, before :data:`BATCH_FACTOR`: payloads, vectors,
    and 512 bytes a point of ids, versions and index entries."""
    return payload_bytes + points * (4 * (dimension or 0) + 512)
