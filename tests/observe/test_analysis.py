"""The straggler verdict, as a pure function."""

from __future__ import annotations

from muster.observe.analysis import MIN_REPORTS, straggler_report


def test_slow_steps_are_flagged():
    out = straggler_report({0: [(0.1, 0.0)] * 5, 1: [(0.1, 0.0)] * 5, 2: [(0.3, 0.0)] * 5})
    assert [out[r]["straggler"] for r in (0, 1, 2)] == [False, False, True]
    assert "3.0x" in out[2]["reason"]


def test_in_lockstep_the_rank_waiting_on_data_is_flagged():
    out = straggler_report({0: [(0.5, 0.01)] * 5, 1: [(0.5, 0.4)] * 5})
    assert out[1]["straggler"] and "on data" in out[1]["reason"] and not out[0]["straggler"]
    assert out[1]["compute_s"] == 0.5 - 0.4 and round(out[1]["data_share"], 2) == 0.8


def test_noise_and_too_few_reports_are_not_flagged():
    assert not any(v["straggler"] for v in straggler_report({0: [(0.100, 0)] * 5, 1: [(0.110, 0)] * 5}).values())
    few = straggler_report({0: [(0.1, 0)] * (MIN_REPORTS - 1), 1: [(1.0, 0)] * (MIN_REPORTS - 1)})
    assert not any(v["straggler"] for v in few.values())
    assert straggler_report({0: [(0.1, 0)] * 5})[0]["straggler"] is False  # one rank: nothing to compare
    assert straggler_report({0: [(None, None)]})[0]["step_s"] == 0.0


def test_only_recent_reports_count():
    slow_then_fast = [(1.0, 0)] * 30 + [(0.1, 0)] * 20
    out = straggler_report({0: slow_then_fast, 1: [(0.1, 0)] * 50})
    assert not out[0]["straggler"] and out[0]["step_s"] == 0.1
