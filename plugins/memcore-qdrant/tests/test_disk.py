"""A full disk: Qdrant Edge memory-maps its files, and a write on a full filesystem used to kill
the process with SIGBUS. The watermark (``memcore_qdrant.disk``) refuses such writes, typed.

The scenario runs on a small tmpfs mounted for the test (root only; skipped elsewhere), in a
subprocess, so that a SIGBUS shows as the subprocess's exit status rather than killing pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FILESYSTEM_MIB = 400

SCENARIO = """
import os, sys
from pathlib import Path
from memcore_qdrant import QdrantStore, StoreFullError, disk
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
import numpy as np

fs = Path(sys.argv[1])
url = f"qdrant://{fs / 'store'}"
scope = Scope(tenant="acme", user_id="alice")
rng = np.random.default_rng(1)

def batch(n):
    content = "x" * 2000
    messages = [Message(role="user", content=f"{i} {content}") for i in range(n)]
    records = [MemoryRecord(scope=scope, message=message) for message in messages]
    return records, rng.standard_normal((n, 64)).astype(np.float32)

store = QdrantStore.from_url(url)
acked = []
for _ in range(5):
    records, vectors = batch(100)
    store.add(records, vectors)
    acked += [r.id for r in records]

# Something else fills the disk, leaving a little more than the watermark needs.
needed = disk.unbacked_bytes(fs / "store") + disk.MARGIN_BYTES + 24 * 2**20
ballast = os.open(fs / "ballast", os.O_CREAT | os.O_WRONLY, 0o600)
os.posix_fallocate(ballast, 0, max(1, disk.free_bytes(fs) - needed))
os.close(ballast)

refused = None
for _ in range(3000):  # 3,000 batches are ~6 GB: far past the filesystem, if nothing refused
    records, vectors = batch(100)
    try:
        store.add(records, vectors)
    except StoreFullError as exc:
        refused = exc
        break
    acked += [r.id for r in records]
assert refused is not None, "the disk never filled"
assert store.get(scope, [records[0].id]) == [], "a refused batch was stored"
assert store.count(scope) == len(acked), (store.count(scope), len(acked))
assert len(store.search(scope, vector=vectors[0], limit=5)) == 5
assert len(store.list(scope, limit=3, order="desc")) == 3
store.close()

os.remove(fs / "ballast")
with QdrantStore.from_url(url) as store:
    assert store.count(scope) == len(acked)
    assert len(store.get(scope, acked)) == len(acked), "an acknowledged record was lost"
    records, vectors = batch(10)
    store.add(records, vectors)
    assert store.count(scope) == len(acked) + 10
print(f"acknowledged {len(acked)} records; refused: {refused}")
"""


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FILESYSTEM_MIB}m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_refuses_writes_typed_and_loses_nothing(small_filesystem: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(small_filesystem)], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, (
        f"exit status {run.returncode} (-7 is SIGBUS)\n{run.stdout}\n{run.stderr[-3000:]}"
    )
    assert "refused: refused to add records" in run.stdout


def test_the_holes_are_walked_less_often_while_free_space_is_roomy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memcore_qdrant import disk

    walks: list[int] = []
    walk = disk.unbacked_bytes
    monkeypatch.setattr(disk, "unbacked_bytes", lambda root: walks.append(1) or walk(root))
    watermark = disk.Watermark(tmp_path)
    required = disk.MARGIN_BYTES + disk.BATCH_FACTOR * 1_000
    assert disk.free_bytes(tmp_path) >= disk.ROOMY * required, "the test needs a roomy filesystem"
    for _ in range(2 * disk.ROOMY_REMEASURE_EVERY):
        watermark.check("add", 1_000)
    assert len(walks) == 2  # the first write, then once per ROOMY_REMEASURE_EVERY

    walks.clear()
    tight = disk.Watermark(tmp_path)
    tight_adds = disk.free_bytes(tmp_path) // (disk.BATCH_FACTOR * disk.ROOMY)  # free is < ROOMY x required
    for _ in range(2 * disk.REMEASURE_EVERY):
        tight.check("add", tight_adds)
    assert len(walks) == 2
