"""The controller's pure decisions, tested exhaustively with plain values."""

from __future__ import annotations

import itertools
import math

import pytest

from muster.train._internal.policies import (
    CheckpointRecord,
    Decision,
    behind,
    on_failure,
    rank_best,
    round_ready,
    settle_reporters,
    score_of,
    to_delete,
)


def rec(round_: int, **metrics) -> CheckpointRecord:
    return CheckpointRecord(round_, f"/run/checkpoint_{round_:06d}", metrics)


# -- on_failure ------------------------------------------------------------------
def test_on_failure_never_retries_what_cannot_be_retried():
    assert on_failure(-1, 1, retryable=False) is Decision.RAISE
    assert on_failure(5, 1, retryable=True) is Decision.RETRY


@pytest.mark.parametrize("max_failures", [0, 1, 2, 5])
def test_on_failure_retries_exactly_max_failures_times(max_failures):
    decisions = [on_failure(max_failures, n) for n in range(1, max_failures + 3)]
    assert decisions[:max_failures] == [Decision.RETRY] * max_failures
    assert decisions[max_failures:] == [Decision.RAISE] * 2


def test_on_failure_zero_budget_raises_on_first_failure():
    assert on_failure(0, 1) is Decision.RAISE


@pytest.mark.parametrize("n", [1, 2, 10, 10_000])
def test_on_failure_minus_one_retries_forever(n):
    assert on_failure(-1, n) is Decision.RETRY


# -- score_of --------------------------------------------------------------------
def test_score_of_reads_numbers_and_nested_paths():
    assert score_of(rec(1, loss=0.5), "loss") == 0.5
    assert score_of(rec(1, acc=3), "acc") == 3.0
    assert score_of(rec(1, val={"loss": 2}), "val/loss") == 2.0
    assert score_of(rec(1, loss="0.25"), "loss") == 0.25


@pytest.mark.parametrize(
    "metrics, attribute",
    [
        ({"loss": 1.0}, None),
        ({"loss": 1.0}, "acc"),
        ({"loss": "high"}, "loss"),
        ({"loss": None}, "loss"),
        ({"loss": [1.0]}, "loss"),
        ({"loss": math.nan}, "loss"),
        ({"val": 1.0}, "val/loss"),
        ({"val": {"acc": 1}}, "val/loss"),
    ],
)
def test_score_of_missing_or_unusable_is_none(metrics, attribute):
    assert score_of(CheckpointRecord(1, "p", metrics), attribute) is None


# -- rank_best -------------------------------------------------------------------
def test_rank_best_without_attribute_is_newest_first():
    records = [rec(2), rec(7), rec(1), rec(5)]
    assert [r.round for r in rank_best(records, None, "max")] == [7, 5, 2, 1]
    assert [r.round for r in rank_best(records, None, "min")] == [7, 5, 2, 1]


def test_rank_best_max_and_min():
    records = [rec(1, acc=0.5), rec(2, acc=0.9), rec(3, acc=0.1), rec(4, acc=0.7)]
    assert [r.round for r in rank_best(records, "acc", "max")] == [2, 4, 1, 3]
    assert [r.round for r in rank_best(records, "acc", "min")] == [3, 1, 4, 2]


def test_rank_best_ties_go_to_the_newest():
    records = [rec(1, loss=1.0), rec(3, loss=1.0), rec(2, loss=1.0)]
    assert [r.round for r in rank_best(records, "loss", "min")] == [3, 2, 1]
    assert [r.round for r in rank_best(records, "loss", "max")] == [3, 2, 1]


def test_rank_best_unscored_last_newest_first():
    records = [rec(1, loss=0.3), rec(2), rec(3, loss=0.1), rec(4, loss=math.nan), rec(5, loss=0.2)]
    assert [r.round for r in rank_best(records, "loss", "min")] == [3, 5, 1, 4, 2]


def test_rank_best_does_not_modify_input():
    records = [rec(1, loss=3.0), rec(2, loss=1.0)]
    before = list(records)
    rank_best(records, "loss", "min")
    assert records == before


def test_rank_best_empty():
    assert rank_best([], "loss", "min") == []
    assert rank_best([], None, "max") == []


# -- to_delete -------------------------------------------------------------------
def test_to_delete_keeps_everything_without_num_to_keep():
    records = [rec(i, loss=float(i)) for i in range(1, 9)]
    assert to_delete(records, None, "loss", "min") == []


def test_to_delete_nothing_while_under_budget():
    records = [rec(1, loss=1.0), rec(2, loss=2.0)]
    assert to_delete(records, 2, "loss", "min") == []
    assert to_delete(records, 5, "loss", "min") == []


def test_to_delete_newest_without_attribute():
    records = [rec(i) for i in range(1, 6)]
    assert sorted(r.round for r in to_delete(records, 2, None, "max")) == [1, 2, 3]


def test_to_delete_keeps_best_plus_latest():
    # latest (round 5) is the worst, yet it is kept along with the best 2.
    records = [rec(1, loss=0.5), rec(2, loss=0.1), rec(3, loss=0.3), rec(4, loss=0.2), rec(5, loss=9.0)]
    doomed = to_delete(records, 2, "loss", "min")
    assert sorted(r.round for r in doomed) == [1, 3]
    doomed_max = to_delete(records, 2, "loss", "max")
    assert sorted(r.round for r in doomed_max) == [2, 3, 4]  # keeps 5 (best and latest) and 1


def test_to_delete_latest_among_best_keeps_exactly_num_to_keep():
    records = [rec(1, loss=0.5), rec(2, loss=0.4), rec(3, loss=0.3)]
    assert [r.round for r in to_delete(records, 1, "loss", "min")] == [1, 2]


def test_to_delete_unscored_go_first():
    records = [rec(1), rec(2, loss=0.3), rec(3), rec(4, loss=0.1), rec(5, loss=0.2)]
    assert sorted(r.round for r in to_delete(records, 2, "loss", "min")) == [1, 2, 3]


@pytest.mark.parametrize("num_to_keep", [1, 2, 3, 4])
@pytest.mark.parametrize("order", ["min", "max"])
def test_to_delete_invariants_over_all_orderings(num_to_keep, order):
    losses = [0.4, 0.1, 0.3, 0.2, 0.5]
    for perm in itertools.permutations(losses):
        records = [rec(i + 1, loss=v) for i, v in enumerate(perm)]
        doomed = to_delete(records, num_to_keep, "loss", order)
        kept = [r for r in records if r not in doomed]
        ranked = sorted(perm, reverse=(order == "max"))
        best = set(ranked[:num_to_keep])
        assert records[-1] in kept  # the latest always survives
        assert {r.metrics["loss"] for r in kept} == best | {records[-1].metrics["loss"]}
        assert num_to_keep <= len(kept) <= num_to_keep + 1


# -- the commit rule: no clock ----------------------------------------------------
def test_round_ready_when_every_rank_reported():
    assert round_ready({0, 1, 2}, 3, None, 4)
    assert round_ready({0, 1, 2}, 3, frozenset({0}), 4)


def test_round_not_ready_while_ranks_missing_and_reporters_unknown():
    assert not round_ready({0}, 3, None, 1)
    assert not round_ready({0, 2}, 3, None, 1)
    assert not round_ready(set(), 2, None, 1)


def test_round_ready_when_the_reporters_are_in():
    assert round_ready({0}, 4, frozenset({0}), 2)
    assert round_ready({0, 3}, 4, frozenset({0}), 2)
    assert round_ready({1, 2}, 4, frozenset({1, 2}), 2)
    assert not round_ready({1}, 4, frozenset({1, 2}), 2)


def test_a_finished_rank_is_expected_only_up_to_its_last_round():
    assert round_ready({0}, 2, None, 3, finished_at={1: 2})
    assert not round_ready({0}, 2, None, 2, finished_at={1: 2})


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_round_ready_exhaustive_small_worlds(world):
    ranks = range(world)
    subsets = [frozenset(c) for k in range(world + 1) for c in itertools.combinations(ranks, k)]
    for reported in subsets:
        for reporters in [None, *subsets]:
            got = round_ready(set(reported), world, reporters, 3)
            expected = frozenset(ranks) if reporters is None else reporters
            assert got == (bool(reported) and expected <= reported), (reported, reporters)


def test_reporters_settle_without_a_clock():
    assert settle_reporters(2, {0: 1, 1: 1}, 0, set()) == frozenset({0, 1})
    assert settle_reporters(2, {0: 10}, 0, set()) is None  # rank 1 may be slow
    assert settle_reporters(2, {0: 11}, 0, set()) == frozenset({0})  # 11 rounds in: rank 1 never reports
    assert settle_reporters(2, {0: 13}, 3, set()) is None  # counted from the attempt's first round
    assert settle_reporters(2, {0: 1}, 0, {1}) == frozenset({0})  # rank 1 finished without a report
    assert settle_reporters(2, {}, 0, set()) is None


def test_behind_names_ranks_three_rounds_back():
    assert behind({0: 1, 1: 4}, frozenset({0, 1}), 0) == [0]
    assert behind({0: 2, 1: 4}, frozenset({0, 1}), 0) == []
    assert behind({1: 3}, frozenset({0, 1}), 0) == [0]  # not reported yet in this attempt
    assert behind({0: 1, 1: 4}, frozenset({1}), 0) == []  # rank 0 is not a reporter
