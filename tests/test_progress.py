"""The live view: plain lines off a terminal, a rich panel on one; never markup from user text."""

from __future__ import annotations

import io

from rich.console import Console

from muster.observe.progress import ProgressView


def test_plain_lines_when_not_a_tty(capsys):
    view = ProgressView("demo", 2, verbose=1, run_path="/tmp/x")
    view.start()
    view.on_report({"loss": 0.5, "training_iteration": 1, "_rank": 0}, lead=True)
    view.event("2/2 workers up")
    view.stop("finished")
    out = capsys.readouterr().out
    assert "[muster] run 'demo' -> /tmp/x" in out
    assert "iter 1 | loss=0.5\n" in out and "2/2 workers up" in out  # no rate before a second of reports
    assert "finished after" in out and "last report: loss=0.5" in out
    assert all(line.startswith("[muster] ") for line in out.strip().splitlines())


def test_verbose_zero_is_silent(capsys):
    view = ProgressView("quiet", 2, verbose=0, run_path="/tmp/x")
    view.start()
    view.on_report({"loss": 0.5}, lead=True)
    view.stop("finished")
    assert capsys.readouterr().out == ""


def test_panel_shows_state_and_keeps_brackets_literal():
    view = ProgressView("run[1]", 2, verbose=1, run_path="/tmp/x")
    view.set_state("running", workers_up=2, attempt=0)
    view.on_report({"note": "[red]not markup[/red]", "training_iteration": 3}, lead=True)
    view.on_checkpoint("checkpoint_000003")
    console = Console(file=io.StringIO(), width=120, record=True)
    console.print(view._render())
    text = console.export_text()
    assert "run[1]" in text and "(running)" in text and "2/2 up" in text
    assert "[red]not markup[/red]" in text and "checkpoint_000003" in text


def test_rate_needs_a_second_of_history():
    view = ProgressView("r", 2, verbose=0, run_path="/tmp/x")
    view.on_report({"a": 1}, lead=True)
    view.on_report({"a": 1}, lead=False)  # two reports milliseconds apart
    assert view.rate() == 0.0  # not thousands per second
