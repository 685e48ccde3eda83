"""One child process under a time and a memory limit: the runner's engine worker, PSC's LALR analysis and
CFGzip's preprocessor all run through :class:`LimitedProcess`.

The parent waits for the next message, the child's exit, the time limit or the memory limit (resident set of
the child and all its descendants, sampled every 0.1 s), whichever comes first, and kills the whole process tree
when it gives up. Messages are length-framed pickles over a dedicated pair of pipes (not stdin/stdout, so that
whatever a library prints cannot corrupt them); the child opens its end with :meth:`Channel.from_env`.
A child that calls :func:`die_with_parent` is killed by the kernel when its parent dies (a killed run leaves
no orphan computing on).
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil

CHANNEL_ENV = "GCDBENCH_CHANNEL"
PARENT_ENV = "GCDBENCH_PARENT_PID"
POLL_S = 0.1


class Channel:
    """Framed pickles (8-byte little-endian length, then the pickle) over two pipe file descriptors."""

    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd = rfd, wfd

    @classmethod
    def from_env(cls) -> "Channel":
        """The child's end, named by the parent in ``$GCDBENCH_CHANNEL``."""
        r, w = (int(x) for x in os.environ[CHANNEL_ENV].split(","))
        return cls(r, w)

    def send(self, obj) -> None:
        data = pickle.dumps(obj, protocol=5)
        view = memoryview(len(data).to_bytes(8, "little") + data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def _read(self, n: int) -> bytes:
        parts, got = [], 0
        while got < n:
            chunk = os.read(self.rfd, n - got)
            if not chunk:
                raise EOFError("the other end closed the channel")
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def recv(self):
        """The next message (blocks); EOFError when the other side is gone."""
        return pickle.loads(self._read(int.from_bytes(self._read(8), "little")))

    def readable(self, timeout_s: float) -> bool:
        return bool(select.select([self.rfd], [], [], max(0.0, timeout_s))[0])

    def close(self) -> None:
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass
class Event:
    """What ended a wait: ``message`` (value = the message), ``exit`` (value = exit code, negative = signal),
    ``timeout`` or ``oom`` (value = resident MB when the limit was hit)."""

    kind: str
    value: Any = None


def die_with_parent() -> None:
    """In a child: ask the kernel for SIGKILL when the parent dies (Linux ``PR_SET_PDEATHSIG``), and exit at once
    if it is already gone. Elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        os._exit(1)


def exit_description(code: int | None) -> str:
    """``exit code 3`` or ``killed by signal 9 (SIGKILL)``."""
    if code is None:
        return "unknown exit status"
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class LimitedProcess:
    """A child process (``argv``) the parent can wait on under limits; see the module docstring.

    ``channel=True`` gives the child a message channel (:meth:`send`, messages returned by :meth:`wait`).
    ``stdin`` may be bytes (written, then closed). After the child has exited, :attr:`returncode` and
    :attr:`peak_rss_mb` (its own peak resident set, from ``wait4``) are set.
    """

    def __init__(self, argv: list[str], *, channel: bool = False, env: dict | None = None, stdin: bytes | None = None,
                 stdout=None, stderr=None, cwd=None):
        env = dict(os.environ if env is None else env)
        env[PARENT_ENV] = str(os.getpid())
        self.channel = None
        child_fds: tuple = ()
        if channel:
            p2c_r, p2c_w = os.pipe()
            c2p_r, c2p_w = os.pipe()
            child_fds = (p2c_r, c2p_w)
            env[CHANNEL_ENV] = f"{p2c_r},{c2p_w}"
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, pass_fds=child_fds, stdout=stdout, stderr=stderr,
                                         stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        finally:
            for fd in child_fds:
                os.close(fd)
        if channel:
            self.channel = Channel(c2p_r, p2c_w)
        self.pid = self.proc.pid
        self.returncode: int | None = None
        self.peak_rss_mb: float | None = None
        try:
            self.ps = psutil.Process(self.pid)
        except psutil.Error:
            self.ps = None
        if stdin is not None:
            try:
                self.proc.stdin.write(stdin)
            except BrokenPipeError:
                pass
            finally:
                self.proc.stdin.close()

    # -- state ---------------------------------------------------------------------------------------------
    def rss_mb(self) -> float:
        """Resident memory of the child and all its descendants (MB); 0 once it is gone."""
        if self.ps is None:
            return 0.0
        try:
            procs = [self.ps, *self.ps.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def _reap(self, block: bool) -> bool:
        """Collect the exit status (and rusage) if the child has exited; True when it has."""
        if self.returncode is not None:
            return True
        try:
            pid, status, rusage = os.wait4(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.returncode = self.proc.poll() if self.proc.returncode is None else self.proc.returncode
            return True
        if pid != self.pid:
            return False
        self.returncode = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self.returncode
        self.peak_rss_mb = rusage.ru_maxrss / 1024.0   # Linux: kilobytes
        return True

    @property
    def alive(self) -> bool:
        return not self._reap(block=False)

    # -- messages ------------------------------------------------------------------------------------------
    def send(self, obj) -> bool:
        """Send a message; False when the child is gone."""
        try:
            self.channel.send(obj)
            return True
        except (BrokenPipeError, OSError):
            return False

    def wait(self, timeout_s: float | None, memory_mb: float | None = None,
             on_message: Callable[[Any], bool] | None = None) -> Event:
        """Wait for the next message (with a channel), the child's exit, ``timeout_s`` or ``memory_mb``.

        ``on_message(msg)`` may consume a message (return True) so that waiting goes on (progress reports,
        batches of rows). On a time-out the child is left running (the caller decides); over the memory limit
        it is killed with its descendants."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if left <= 0:
                return Event("timeout")
            if self.channel is not None:
                if self.channel.readable(left):
                    try:
                        msg = self.channel.recv()
                    except (EOFError, OSError):
                        self._reap(block=True)
                        return Event("exit", self.returncode)
                    if on_message is not None and on_message(msg):
                        continue
                    return Event("message", msg)
            else:
                time.sleep(left)
            if self._reap(block=False):
                if self.channel is not None and self.channel.readable(0):
                    continue   # read what it sent before exiting
                return Event("exit", self.returncode)
            rss = self.rss_mb()
            if memory_mb and rss > memory_mb:
                self.kill()
                return Event("oom", rss)

    def drain(self, on_message: Callable[[Any], Any]) -> None:
        """Pass every message still in the channel to ``on_message`` (after the child was killed or exited)."""
        if self.channel is None:
            return
        try:
            while self.channel.readable(0):
                on_message(self.channel.recv())
        except (EOFError, OSError):
            pass

    # -- ending --------------------------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL the child and every descendant, and reap it."""
        try:
            kids = self.ps.children(recursive=True) if self.ps is not None else []
        except psutil.Error:
            kids = []
        for p in kids:
            try:
                p.kill()
            except psutil.Error:
                pass
        if self.returncode is None:
            try:
                self.proc.kill()
            except OSError:
                pass
            self._reap(block=True)

    def close(self, grace_s: float = 0.0) -> None:
        """Wait up to ``grace_s`` for the child to exit, then kill what is left and close the channel."""
        deadline = time.monotonic() + grace_s
        while self.returncode is None and time.monotonic() < deadline:
            if self._reap(block=False):
                break
            time.sleep(0.02)
        self.kill()
        if self.channel is not None:
            self.channel.close()
