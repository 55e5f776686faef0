"""Scoring a regression suite's check, and the gate, on hand-made probabilities."""

import numpy as np
import pytest

from probe_core import suites
from probe_core.errors import ProbeError


def test_a_finding_labelled_as_a_novel_class_counts_when_the_classifier_is_unsure():
    check = {"id": 1, "data": {"labels": np.array([suites.NOVEL, suites.NOVEL, 3]),
                               "found_predictions": np.array([2, 2, 3])}}
    probs = np.array([[0.1] * 10, [0.0] * 10, [0.0] * 10], dtype=np.float32)
    probs[0, 2] = 0.3  # unsure: right for a novel class
    probs[1, 2] = 0.95  # sure of a class it cannot be
    probs[2, 3] = 0.9
    score = suites.score_check(check, probs)
    assert score.accuracy == pytest.approx(2 / 3)
    assert score.confidence == pytest.approx(0.9)  # on the labelled class, where there is one
    assert score.wrong_confidence == pytest.approx((0.3 + 0.95) / 2)


def test_the_gate_fails_checks_below_the_threshold_or_below_the_baseline():
    score = suites.ScoreResult("s", "digits", 3, "new", [{"id": 1, "name": "a", "accuracy": 0.95},
                                                          {"id": 2, "name": "b", "accuracy": 0.6},
                                                          {"id": 3, "name": "c", "accuracy": 0.85}])
    assert [f["id"] for f in suites.regressions(score, 0.8)] == [2]
    baseline = suites.ScoreResult("s", "digits", 3, "old", [{"id": 1, "accuracy": 0.97}, {"id": 3, "accuracy": 0.95}])
    failed = suites.regressions(score, 0.5, baseline, max_drop=0.05)
    assert [(f["id"], f["reason"]) for f in failed] == [(3, "10 points below old")]
    assert suites.regressions(score, 0.0) == []
    with pytest.raises(ProbeError, match="fraction"):
        suites.regressions(score, 80)
    # a stored score reads back as the same typed result
    assert suites.ScoreResult.from_record(score.to_record()) == score
