"""Relay worker stdout/stderr to the driver, one prefixed line at a time.

Workers write straight into a Unix socket (their fds 1 and 2 *are* the
socket), so nothing sits in a buffer inside a worker that a SIGKILL could
lose, and C-level output (gloo, NCCL) is captured too.  Every line also goes
to the runtime's log sinks (``Runtime.add_log_sink``: the run store keeps them).
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import threading
from typing import Callable

from muster.core import settings
from muster.core.runtime import LogSink

_echo = True  # print relayed lines on the driver's stdout (``init(log_to_driver=False)`` turns it off)
_MARK = b"\x1emuster-label "  # in a worker's stream: the lines after it carry the label that follows
_attached = False  # in a worker: fds 1 and 2 are the relay's socket


def set_echo(enabled: bool) -> None:
    """Print workers' output on the driver's console (sinks get it either way)."""
    global _echo
    _echo = bool(enabled)


def mark_attached() -> None:
    """In a worker whose fds 1 and 2 now are the relay's socket: :func:`relabel` may speak to the relay."""
    global _attached
    _attached = True


def relabel(label: str) -> None:
    """In a worker: its output lines from here on read ``(<label>, pid=...)``. Said in the stream
    itself, so lines already written keep the label they had, however late the relay reads them.
    Nothing happens where output is not relayed by this engine (a Ray worker's is Ray's)."""
    if not _attached:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or replaced stream has nothing to flush
            pass
    os.write(1, _MARK + " ".join(label.splitlines()).encode("utf-8", "backslashreplace") + b"\n")


class LogRelay:
    def __init__(self, address: str, label_for: Callable[[int], tuple[str, int | None]], sink: LogSink):
        self.address = address
        self._label_for = label_for
        self._sink = sink
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(address)
        self._server.listen(256)
        self._server.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = os.pipe()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._closed = False
        self._prefix = settings.log_prefix_enabled()
        self._thread = threading.Thread(target=self._run, name="muster-logs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.write(self._wake_w, b"x")
        self._thread.join(2)

    def _run(self) -> None:
        state: dict[socket.socket, list] = {}  # sock -> [worker_id or None, pending bytes, label said in band]
        try:
            while not self._closed:
                for key, _ in self._sel.select():
                    if key.data == "wake":
                        return
                    if key.fileobj is self._server:
                        try:
                            conn, _ = self._server.accept()
                        except BlockingIOError:
                            continue
                        conn.setblocking(False)
                        state[conn] = [None, b"", None]
                        self._sel.register(conn, selectors.EVENT_READ, "worker")
                        continue
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    st = state[sock]
                    if not data:
                        self._emit(st, final=True)
                        self._sel.unregister(sock)
                        sock.close()
                        del state[sock]
                        continue
                    st[1] += data
                    self._emit(st, final=False)
        finally:
            for sock, st in state.items():
                self._emit(st, final=True)
                sock.close()
            self._server.close()

    def _emit(self, st: list, final: bool) -> None:
        buf: bytes = st[1]
        if st[0] is None:
            head, sep, rest = buf.partition(b"\n")
            if not sep:
                return
            st[0], buf = int(head), rest
        *lines, tail = buf.split(b"\n")
        if final and tail:
            lines.append(tail)
            tail = b""
        st[1] = tail
        run: list[bytes] = []
        for line in lines:
            before, mark, label = line.partition(_MARK)
            if before or not mark:
                run.append(before)
            if mark:
                self._relay(st, run)
                run, st[2] = [], label.decode("utf-8", "backslashreplace")
        self._relay(st, run)

    def _relay(self, st: list, lines: list[bytes]) -> None:
        if not lines:
            return
        label, pid = self._label_for(st[0])
        label = st[2] or label
        decoded = [line.decode("utf-8", "backslashreplace") for line in lines]
        self._sink(label, pid, decoded)
        if not _echo:
            return
        prefix = f"({label}, pid={pid}) " if self._prefix else ""
        text = "".join(f"{prefix}{line}\n" for line in decoded)
        out = sys.stdout
        try:
            out.write(text)
            out.flush()
        except Exception:
            pass

