"""The live trial table: what a person sees on a terminal and in CI logs."""

from __future__ import annotations

import io

from rich.console import Console

from muster.observe.tune_progress import TuneProgress
from muster.tune.trial import Trial


def _trials():
    a = Trial("ab_00000", "f_ab_00000", {"lr": 0.01, "net": {"width": 64}}, "/x/a", {"CPU": 1.0}, status="RUNNING",
              last_result={"loss": 0.5, "training_iteration": 3})
    b = Trial("ab_00001", "f_ab_00001", {"lr": 0.1, "net": {"width": 32}}, "/x/b", {"CPU": 1.0}, status="TERMINATED",
              last_result={"loss": 0.25, "training_iteration": 8})
    c = Trial("ab_00002", "f_ab_00002", {"lr": 0.3, "net": {"width": 16}}, "/x/c", {"CPU": 1.0}, status="ERROR")
    return [a, b, c]


def test_table_shows_status_config_iteration_metric_and_best():
    view = TuneProgress("exp", "/x", "loss", "min", verbose=1)
    view.update(_trials(), "ASHA: 1 stopped early")
    out = io.StringIO()
    Console(file=out, width=160, force_terminal=False).print(view._render())
    text = out.getvalue()
    for expected in ("ab_00000", "RUNNING", "TERMINATED", "ERROR", "lr", "net/width", "0.01", "64",
                     "ASHA: 1 stopped early", "best loss=0.25 (f_ab_00001)", "1 RUNNING", "1 TERMINATED", "1 ERROR"):
        assert expected in text, (expected, text)
    assert text.index("ab_00000") < text.index("ab_00001")  # running trials first


def test_plain_lines_when_not_a_terminal(capsys):
    view = TuneProgress("exp", "/x", "loss", "max", verbose=1)
    view.start()
    view.event("f_ab_00000 started with {lr=0.01}")
    view.stop(_trials())
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[muster.tune] experiment 'exp' -> /x"
    assert out[1] == "[muster.tune] f_ab_00000 started with {lr=0.01}"
    assert out[2].startswith("[muster.tune] experiment 'exp' done after") and "best loss=0.5 (f_ab_00000)" in out[2]


def test_silent_at_verbose_0(capsys):
    view = TuneProgress("exp", "/x", None, None, verbose=0)
    view.start()
    view.update(_trials(), "")
    view.stop(_trials())
    assert capsys.readouterr().out == ""
