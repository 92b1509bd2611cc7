"""Crash scenarios: a writer process killed with SIGKILL at random moments, and stale locks.

:func:`crash_loop` starts a writer on a durable store URL that adds batches and
prints each batch's ids once ``add`` has returned (the acknowledgement), kills
it after a random number of acknowledgements plus a random delay, then checks
the store in a fresh *verifier process* (so that a store whose files make the
engine crash on open is counted, not fatal to the caller): it must open, hold
every acknowledged record once, no record the writer never tried to write, and
every batch whole or absent, and every record's vector still in the index (a
search for as many hits as there are records, up to 10,000, returns them all).
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from memcore.bench.workloads import fresh
from memcore.testing.reliability import Figures, zeros

WRITER = """
import sys
import numpy as np
from memcore.plugins import open_store
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope

url, run, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
scope = Scope(tenant="crash")
store = open_store(url)
rng = np.random.default_rng(abs(hash(run)) % 2**32)
for batch in range(10**9):
    name = f"{run}-{batch}"
    records = [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"{name}-{i}"),
                     metadata={"batch": name})
        for i in range(size)
    ]
    print("try", *(r.id for r in records), flush=True)
    store.add(records, rng.standard_normal((size, 8)).astype(np.float32))
    print("ack", *(r.id for r in records), flush=True)
"""

VERIFIER = """
import json, sys
from memcore.plugins import open_store
from memcore.scope import Scope

with open_store(sys.argv[1]) as store:
    records = store.list(Scope(tenant="crash"))
    wanted = min(len(records), 10_000)
    hits = store.search(Scope(tenant="crash"), vector=[1.0] * 8, limit=wanted) if records else []
    print(json.dumps({"ids": [str(r.id) for r in records], "batches": [r.metadata["batch"] for r in records],
                      "searchable": len(hits) == wanted}))
"""


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0"}


def _read_acknowledged(writer: subprocess.Popen[bytes], wanted: int, timeout: float) -> bytes:
    """Output of ``writer`` until it acknowledged ``wanted`` batches (or ``timeout`` passed)."""
    assert writer.stdout is not None
    output = b""
    deadline = time.monotonic() + timeout
    # A selector, not select.select: that refuses descriptors above 1023, which a test process
    # holding many connections reaches.
    with selectors.DefaultSelector() as selector:
        selector.register(writer.stdout, selectors.EVENT_READ)
        while output.count(b"\nack ") + output.startswith(b"ack ") < wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if selector.select(remaining):
                chunk = os.read(writer.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                output += chunk
    return output


def crash_loop(
    url: str,
    kills: int,
    batch: int = 20,
    seed: int = 0,
    timeout: float = 120.0,
    kills_per_store: int = 50,
    report: Callable[[Figures], None] | None = None,
) -> Figures:
    """Kill a writer ``kills`` times and verify the store after each kill; return the figures.

    :param url: a durable store URL with ``{tmp}`` (or ``{name}``, for a server's table).
    :param kills_per_store: kills on one store before the next starts in a fresh folder, so that
        every kill costs about the same (the writer and the verifier each reopen the whole store).
    :param report: called with the figures so far after each store, so that a long run cut
        short still tells what it found.
    """
    chance = random.Random(seed)
    failures = ("failed_reopens", "lost", "duplicates", "phantoms", "partial_batches", "unsearchable")
    figures = zeros("kills", "reopened", *failures)
    acknowledged_total = 0
    for first in range(0, kills, kills_per_store):
        tried: set[str] = set()
        acknowledged: set[str] = set()
        with tempfile.TemporaryDirectory(prefix="memcore-crash-") as folder:
            location = fresh(url, folder + "/store")
            for kill in range(first, min(kills, first + kills_per_store)):
                output = _kill_a_writer(location, f"{seed}-{kill}", batch, chance, timeout)
                for line in output.split(b"\n")[:-1]:  # a line cut short was never acknowledged
                    kind, *ids = line.decode().split()
                    (acknowledged if kind == "ack" else tried).update(ids)
                figures["kills"] += 1
                _verify(location, tried, acknowledged, batch, figures, timeout)
        acknowledged_total += len(acknowledged)
        if report is not None:
            report({**figures, "acknowledged": acknowledged_total})
    figures["acknowledged"] = acknowledged_total
    return dict(figures)


def _kill_a_writer(location: str, run: str, batch: int, chance: random.Random, timeout: float) -> bytes:
    """Start a writer, SIGKILL it after a random number of acknowledgements and delay; its output."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, location, run, str(batch)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_environment(),
    )
    try:
        output = _read_acknowledged(writer, chance.randint(0, 3), timeout)
        time.sleep(chance.uniform(0, 0.05))
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    assert writer.stdout is not None
    output += writer.stdout.read()
    writer.stdout.close()
    return output


def _verify(
    location: str, tried: set[str], acknowledged: set[str], batch: int, figures: Counter[str], timeout: float
) -> None:
    verifier = subprocess.run(
        [sys.executable, "-c", VERIFIER, location],
        capture_output=True,
        timeout=timeout,
        env=_environment(),
    )
    if verifier.returncode != 0:
        figures["failed_reopens"] += 1
        figures[f"reopen_exit_{verifier.returncode}"] += 1
        # The figures say that a reopen failed; the verifier's last words say why.
        print(
            f"reopen of {location} failed:\n{verifier.stderr.decode(errors='replace')[-2000:]}",
            file=sys.stderr,
        )
        return
    state: dict[str, Any] = json.loads(verifier.stdout)
    stored = state["ids"]
    figures["reopened"] += 1
    figures["lost"] += len(acknowledged - set(stored))
    figures["duplicates"] += len(stored) - len(set(stored))
    figures["phantoms"] += len(set(stored) - tried)
    figures["partial_batches"] += sum(1 for size in Counter(state["batches"]).values() if size != batch)
    figures["unsearchable"] += int(not state["searchable"])


HOLDER = """
import sys, time
from memcore.plugins import open_store
store = open_store(sys.argv[1])
print("ready", flush=True)
time.sleep(600)
"""

OPENER = """
import sys
from memcore.errors import MemcoreError, StoreLockedError
from memcore.plugins import open_store
try:
    open_store(sys.argv[1]).close()
    print("opened")
except StoreLockedError:
    print("locked")
except MemcoreError as exc:
    print("typed", type(exc).__name__)
"""


def second_process(url: str, timeout: float = 120.0) -> Figures:
    """Another process opens a durable location a first process holds: a typed refusal (or a
    correct shared open); then the holder is killed and the location must open again at once."""
    figures = zeros("stale_lock_blocked")
    with tempfile.TemporaryDirectory(prefix="memcore-lock-") as folder:
        location = url.replace("{tmp}", folder + "/store")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, location], stdout=subprocess.PIPE, env=_environment()
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == b"ready", "the holder did not open the store"
            second = subprocess.run(
                [sys.executable, "-c", OPENER, location], capture_output=True, timeout=timeout, text=True
            )
            outcome = second.stdout.split()[0] if second.returncode == 0 and second.stdout else "untyped"
            figures[f"second_open_{outcome}"] += 1
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=60)
            if holder.stdout is not None:
                holder.stdout.close()
        after_kill = subprocess.run(
            [sys.executable, "-c", OPENER, location], capture_output=True, timeout=timeout, text=True
        )
        figures["stale_lock_blocked"] += int(after_kill.stdout.strip() != "opened")
    return dict(figures)
