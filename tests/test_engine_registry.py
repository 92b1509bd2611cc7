"""The kit's engine registry: one engine per folder and process, one process per folder, fork-aware."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memcore.engine_registry import EngineRegistry, OpenFolder
from memcore.errors import StoreLockedError


class FakeEngine:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.closed = False


def _close(opened: OpenFolder[FakeEngine]) -> None:
    opened.engine.closed = True


@pytest.fixture
def registry() -> EngineRegistry[FakeEngine]:
    return EngineRegistry("test.lock", "test store", advice="close it there first")


def test_stores_of_one_folder_share_one_engine_until_the_last_closes(
    registry: EngineRegistry[FakeEngine], tmp_path: Path
) -> None:
    first = registry.acquire(tmp_path / "db", "fake", FakeEngine)
    second = registry.acquire(tmp_path / "db" / ".." / "db", "fake", FakeEngine)
    assert first is second and first.users == 2
    assert oct((tmp_path / "db").stat().st_mode & 0o777) == "0o700"
    registry.release(first, _close)
    assert not first.engine.closed
    registry.release(second, _close)
    assert first.engine.closed
    third = registry.acquire(tmp_path / "db", "fake", FakeEngine)
    assert third is not first and not third.engine.closed
    registry.release(third, _close)


def test_another_engine_kind_on_an_open_folder_is_refused(
    registry: EngineRegistry[FakeEngine], tmp_path: Path
) -> None:
    opened = registry.acquire(tmp_path, "fake", FakeEngine)
    with pytest.raises(StoreLockedError, match="fake engine"):
        registry.acquire(tmp_path, "other", FakeEngine)
    registry.release(opened, _close)


def test_a_forked_child_neither_shares_nor_closes_the_parents_engine(
    registry: EngineRegistry[FakeEngine], tmp_path: Path
) -> None:
    opened = registry.acquire(tmp_path, "fake", FakeEngine)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running any cleanup of the parent's
        code = 0
        try:
            registry.release(opened, _close)  # the parent's: left alone
            code |= 1 if opened.engine.closed else 0
            try:
                registry.acquire(tmp_path, "fake", FakeEngine)
                code |= 2  # the folder is the parent's: it must stay locked
            except StoreLockedError:
                pass
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child_code = os.read(read, 1)
    os.close(read)
    assert os.WEXITSTATUS(status) == 0
    assert child_code == b"\x00", "the child closed the parent's engine (1) or opened its folder (2)"
    assert opened.users == 1 and not opened.engine.closed
    registry.release(opened, _close)
    assert opened.engine.closed
