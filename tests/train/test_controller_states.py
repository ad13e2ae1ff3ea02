"""The controller's state table: every state listed, final states final, the drawn path allowed."""

from __future__ import annotations

import pytest

from muster.train.controller import _ALLOWED, _FINAL, State


def test_every_state_has_a_row_and_final_states_have_no_exit():
    assert set(_ALLOWED) == set(State)
    assert _FINAL == {State.FINISHED, State.ERRORED, State.INTERRUPTED, State.STOPPED}
    for state in _FINAL:
        assert _ALLOWED[state] == frozenset()


@pytest.mark.parametrize(
    "path",
    [
        [State.INITIALIZING, State.SCHEDULING, State.RUNNING, State.FINISHED],
        [State.INITIALIZING, State.SCHEDULING, State.RUNNING, State.RESTARTING, State.SCHEDULING,
         State.RUNNING, State.STOPPED],
        [State.INITIALIZING, State.SCHEDULING, State.RUNNING, State.RESTARTING, State.ERRORED],
        [State.INITIALIZING, State.SCHEDULING, State.INTERRUPTED],
    ],
)
def test_the_paths_the_controller_takes_are_allowed(path):
    for before, after in zip(path, path[1:]):
        assert after in _ALLOWED[before], (before, after)


def test_a_run_never_leaves_a_final_state_or_skips_scheduling():
    assert State.RUNNING not in _ALLOWED[State.INITIALIZING]
    assert State.RUNNING not in _ALLOWED[State.RESTARTING]
    assert all(State.RUNNING not in _ALLOWED[s] for s in _FINAL)
