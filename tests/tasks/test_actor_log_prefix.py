"""The label on an actor's output lines (what the driver prints as ``(<label>, pid=<pid>)``): the
actor's ``repr`` once it is built when its class defines ``__repr__``, as Ray's prefixes are."""

from __future__ import annotations

import socket
import threading

from _task_helpers import TIMEOUT, wait_for

import muster
from muster.core.api import get_runtime
from muster.core.local import logs


class Named:
    def __init__(self, index):
        self.index = index
        print("building", index)  # before the actor exists: its class's name

    def __repr__(self):
        return f"Named(index={self.index})"

    def say(self, word):
        print(word)
        return True


class Chatty:
    """Builds with more output than the log socket holds: the relay is still reading it when the
    constructor returns, and those lines were written before the actor had a repr."""

    def __init__(self, lines):
        for i in range(lines):
            print(f"constructor line {i:06d} " + "." * 80)

    def __repr__(self):
        return "Chatty()"

    def say(self, word):
        print(word)
        return True


class Plain:
    def say(self, word):
        print(word)
        return True


def _labels_of(word, lines):
    return [label for label, _, got in lines if word in got]


def test_an_actor_whose_class_defines_repr_labels_its_lines_with_it():
    seen: list[tuple[str, int | None, str]] = []
    lock = threading.Lock()

    def sink(label, pid, lines):
        with lock:
            seen.extend((label, pid, line) for line in lines)

    get_runtime().add_log_sink(sink)
    named, plain = muster.remote(Named).remote(7), muster.remote(Plain).remote()
    try:
        assert muster.get([named.say.remote("hello-named"), plain.say.remote("hello-plain")], timeout=TIMEOUT)
        assert wait_for(lambda: _labels_of("hello-named", seen) and _labels_of("hello-plain", seen), 10), seen
        assert _labels_of("hello-named", seen) == ["actor Named(index=7)"]
        assert _labels_of("hello-plain", seen) == ["actor Plain"]  # no __repr__ of its own: the class's name
        assert wait_for(lambda: _labels_of("building 7", seen), 10)
        assert _labels_of("building 7", seen) == ["actor Named"]  # the constructor's output
    finally:
        get_runtime().remove_log_sink(sink)
        muster.kill(named)
        muster.kill(plain)


def test_lines_written_while_building_keep_the_class_name_however_late_the_relay_reads_them():
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def sink(label, pid, lines):
        with lock:
            seen.extend((label, line) for line in lines if "constructor line" in line or "after-build" in line)

    get_runtime().add_log_sink(sink)
    chatty = muster.remote(Chatty).remote(20_000)
    try:
        assert muster.get(chatty.say.remote("after-build"), timeout=TIMEOUT)
        assert wait_for(lambda: len(seen) == 20_001, 30), len(seen)
        with lock:
            labels = {label for label, line in seen if "constructor line" in line}
            assert labels == {"actor Chatty"}
            assert [label for label, line in seen if "after-build" in line] == ["actor Chatty()"]
    finally:
        get_runtime().remove_log_sink(sink)
        muster.kill(chatty)


def test_the_relay_switches_label_where_the_worker_said_so_in_its_stream(tmp_path):
    got: list[tuple[str, str]] = []
    relay = logs.LogRelay(str(tmp_path / "log.sock"), lambda wid: (f"worker {wid}", 99), lambda label, pid, lines:
                          got.extend((label, line) for line in lines))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(tmp_path / "log.sock"))
            sock.sendall(b"3\nbefore\n" + logs._MARK + b"actor A(1)\nafter\npartial" + logs._MARK + b"actor B\ntail")
        assert wait_for(lambda: len(got) == 4, 10), got
    finally:
        relay.close()
    assert got == [("worker 3", "before"), ("actor A(1)", "after"), ("actor A(1)", "partial"), ("actor B", "tail")]
