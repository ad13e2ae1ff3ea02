"""The label on an actor's output lines (what the driver prints as ``(<label>, pid=<pid>)``): the
actor's ``repr`` once it is built when its class defines ``__repr__``, as Ray's prefixes are."""

from __future__ import annotations

import threading

from _task_helpers import TIMEOUT, wait_for

import muster
from muster.core.api import get_runtime


class Named:
    def __init__(self, index):
        self.index = index
        print("building", index)  # before the actor exists: its class's name

    def __repr__(self):
        return f"Named(index={self.index})"

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
