"""A writer killed with SIGKILL loses nothing it acknowledged, and never leaves half a batch."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from memcore_qdrant import QdrantStore

from memcore.scope import Scope

BATCH = 50
LOOPS = 3
ACKNOWLEDGED_BEFORE_KILL = 4
WRITER = """
import sys
import numpy as np
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore_qdrant import QdrantStore

root, loop, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
scope = Scope(tenant="acme")
store = QdrantStore.from_url("qdrant://" + root)
rng = np.random.default_rng(int(loop))
batch = 0
while True:
    name = f"{loop}-{batch}"
    records = [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"{i}"), metadata={"batch": name})
        for i in range(size)
    ]
    store.add(records, rng.standard_normal((size, 8)).astype(np.float32))
    print(" ".join(str(r.id) for r in records), flush=True)
    batch += 1
"""


def _read_lines(writer: subprocess.Popen[bytes], wanted: int, timeout: float) -> list[bytes]:
    assert writer.stdout is not None
    lines: list[bytes] = []
    pending = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:  # select.select refuses descriptors above 1023
        selector.register(writer.stdout, selectors.EVENT_READ)
        while len(lines) < wanted:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the writer acknowledged too few batches in time"
            if selector.select(remaining):
                chunk = os.read(writer.stdout.fileno(), 1 << 16)
                assert chunk, "the writer died before it was killed"
                *complete, pending = (pending + chunk).split(b"\n")
                lines += complete
    return lines


def test_a_killed_writer_keeps_every_acknowledged_batch_whole(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acknowledged: set[str] = set()
    for loop in range(LOOPS):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(loop), str(BATCH)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            lines = _read_lines(writer, ACKNOWLEDGED_BEFORE_KILL, timeout=60)
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
        assert writer.stdout is not None
        rest = writer.stdout.read()  # batches acknowledged between the last read and the kill
        lines += rest.split(b"\n")[:-1]  # a line cut short was never acknowledged
        writer.stdout.close()
        acknowledged.update(part for line in lines for part in line.decode().split())
        with QdrantStore.from_url(f"qdrant://{root}") as store:
            scope = Scope(tenant="acme")
            stored = store.list(scope)
            missing = acknowledged - {str(r.id) for r in stored}
            assert not missing, f"loop {loop}: {len(missing)} acknowledged records lost"
            sizes = Counter(str(r.metadata["batch"]) for r in stored)
            assert set(sizes.values()) == {BATCH}, f"loop {loop}: partial batches {sizes}"
            assert store.dimension == 8
