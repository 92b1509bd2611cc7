"""A real Chroma server for the tests: ``chroma run`` from this venv, stopped by PID."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Self

CHROMA = Path(sys.executable).with_name("chroma")
START_TIMEOUT = 60.0


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _die_with_parent() -> None:
    # Linux: the server gets SIGTERM if the test process dies without stopping it.
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ChromaServer:
    """``chroma run --path <path> --host 127.0.0.1 --port <port>``, started and stopped by the tests.

    :param path: the server's persist directory.
    :param port: the port (a free one by default); kept across :meth:`stop`/:meth:`start`.
    """

    def __init__(self, path: Path, port: int | None = None) -> None:
        self.path = path
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``chroma+http://`` URL of the server, without a collection."""
        return f"chroma+http://127.0.0.1:{self.port}"

    def _alive(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v2/heartbeat", timeout=1) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> None:
        """Start the server and wait until ``/api/v2/heartbeat`` answers."""
        self._log = (self.path.parent / f"chroma-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [str(CHROMA), "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self._alive():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"chroma run did not start; see {self._log.name}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL) and wait for it."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
