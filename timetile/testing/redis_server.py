"""A real, throwaway ``redis-server`` for tests and benchmarks.

The online stores are tested against the real server, never a mock: :class:`RedisServer`
starts ``redis-server`` from the OS packages on a free local port, without persistence, and
stops it on exit.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from timetile.store.redis_store import RedisStore

_MISSING = ("redis-server is not installed: install it: apt-get install -y redis-server, "
            "or run ./dev.sh test which installs it")


def _free_port() -> int:
    """Return a TCP port that was free a moment ago (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers_ping(port: int) -> bool:
    """Whether a Redis server on ``port`` answers ``PING`` with ``+PONG``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A context manager running ``redis-server`` on a free port of 127.0.0.1.

    No persistence (``--save '' --appendonly no``), its working directory a temporary one.
    Entering starts the server and waits until it answers ``PING`` (up to
    ``startup_timeout`` seconds, three ports tried); leaving terminates it (then kills it
    after 5 s).

    Raises:
        RuntimeError: the ``redis-server`` binary is missing, or the server did not come up
            (the message holds the end of its log).

    >>> with RedisServer() as server:
    ...     server.url.startswith("redis://127.0.0.1:")
    True

    """

    def __init__(self, *, binary: str = "redis-server", startup_timeout: float = 10.0) -> None:
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """Return the server's URL, ``redis://127.0.0.1:PORT/0``; only while it runs."""
        if self._process is None:
            raise RuntimeError("the Redis server is not running: use `with RedisServer()`")
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and wait until it answers; return self."""
        binary = shutil.which(self.binary)
        if binary is None:
            raise RuntimeError(_MISSING)
        self._dir = tempfile.TemporaryDirectory(prefix="timetile-redis-")
        log = Path(self._dir.name) / "redis.log"
        for _ in range(3):  # another process may take the port between probe and bind
            port = _free_port()
            command = [binary, "--save", "", "--appendonly", "no", "--port", str(port),
                       "--bind", "127.0.0.1", "--dir", self._dir.name, "--logfile", str(log)]
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + self.startup_timeout
            while process.poll() is None and time.monotonic() < deadline:
                if _answers_ping(port):
                    self._process, self.port = process, port
                    return self
                time.sleep(0.02)
            _stop(process)
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        self._dir.cleanup()
        self._dir = None
        raise RuntimeError(f"redis-server did not answer PING within {self.startup_timeout} s; "
                           f"its log ends with:\n{tail}")

    def stop(self) -> None:
        """Stop the server (terminate, wait, kill) and remove its directory; idempotent."""
        process, self._process = self._process, None
        if process is not None:
            _stop(process)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate ``process``, and kill it when it has not exited after 5 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def emptied(url: str) -> str:
    """Delete every key of the Redis database at ``url`` (``FLUSHDB``); return ``url``.

    For tests that share one server: a GroupBy uploaded as of a later day refuses an earlier
    day's upload of the same name, so each such test starts from an empty store.
    """
    store = RedisStore(url)
    try:
        store.flush()
    finally:
        store.close()
    return url
