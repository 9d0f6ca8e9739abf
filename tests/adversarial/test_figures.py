"""The suite's figures can fail: what is not measured says so, and a loss is counted before any assert."""

from __future__ import annotations

from collections import Counter

import pytest

from .figures import NOT_MEASURED, summarize
from .tally import bad_input, lost_bytes, partial_bytes


def test_lost_bytes_never_measured_print_not_measured_not_zero():
    shown = summarize({"space/faults_injected": 3, "space/faults_refused": 3})
    assert shown["labels"]["space"]["lost_bytes"] == NOT_MEASURED
    assert shown["totals"]["lost_bytes"] == NOT_MEASURED
    measured = summarize({"kill/faults_injected": 2, "kill/lost_bytes": 0, "kill/lost_bytes_checks": 2})
    assert measured["labels"]["kill"]["lost_bytes"] == 0 and measured["totals"]["lost_bytes"] == 0
    # one surface measured, another not: the total is the measured one's, the other says so
    both = summarize({"a/lost_bytes_checks": 1, "b/faults_injected": 1})
    assert both["totals"]["lost_bytes"] == 0 and both["labels"]["b"]["lost_bytes"] == NOT_MEASURED


def test_an_unlabelled_figure_is_still_shown():
    assert summarize({"faults_injected": 1})["labels"]["unlabelled"]["faults_injected"] == 1


def test_a_loss_is_counted_before_the_assert_that_fails_on_it():
    figures: Counter = Counter()
    source = {"a": b"1234", "b": b"56", "d": "dir", "l": "-> x"}
    with pytest.raises(AssertionError):
        assert lost_bytes(figures, "s", source, {"a": b"12", "d": "dir", "extra": b"zz"}) == 0
    assert figures["s/lost_bytes"] == 4 + 2 + 2 and figures["s/lost_bytes_checks"] == 1
    assert partial_bytes(figures, "s", source, {"a": b"1234", "b": b"5"}) == 1  # absent is fine
    assert summarize(figures)["totals"]["lost_bytes"] == 8


def test_a_bad_input_accepted_is_counted_as_such():
    figures: Counter = Counter()
    bad_input(figures, "x", refused=True)
    bad_input(figures, "x", refused=False)
    assert summarize(figures)["labels"]["x"] == {
        "bad_inputs_tried": 2, "bad_inputs_refused": 1, "bad_inputs_accepted": 1,
        "lost_bytes": NOT_MEASURED, "partial_bytes": NOT_MEASURED,
    }  # fmt: skip
