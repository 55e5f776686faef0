"""The one progress-and-stop protocol: a part of a longer step reports in the whole step's terms."""

import pytest

from helpers import recording
from probe_core.errors import CancelledError
from probe_core.models.training import epochs_of, report_epoch
from probe_core.progress import SILENT, fan_out, rewritten, stage


def test_a_stage_reports_its_fractions_inside_its_share_of_the_step():
    reports = []
    second_half = stage(recording(reports), 0.5, 1.0)
    second_half.report(0.0, "starting", {"epoch": 0})
    second_half.report(0.5)
    second_half.report(2.0)  # out of range: clamped to the stage's end
    second_half.report(None, "a line only")
    assert [r.progress for r in reports] == [0.5, 0.75, 1.0, None]
    assert reports[0].message == "starting" and reports[0].epoch == 0 and reports[3].message == "a line only"
    assert stage(None, 0.0, 0.5) is None


def test_a_rewrite_may_drop_a_report_and_the_stop_comes_from_the_reporter_below():
    reports = []
    below = recording(reports, stop_when=lambda report: report.progress >= 0.5)
    only_fractions = rewritten(below, lambda progress, message, details, force:
                               None if progress is None else (progress, f"at {progress:g}", None, force))
    only_fractions.report(None, "dropped")
    only_fractions.report(0.25, "kept")
    assert [r.message for r in reports] == ["at 0.25"] and not only_fractions.stop_requested()
    with pytest.raises(CancelledError):
        only_fractions.report(0.5)
    assert only_fractions.stop_requested()


def test_a_feature_network_then_its_generator_are_one_bar_of_epochs():
    reports = []
    bar = recording(reports)
    report_epoch(epochs_of(bar, "rae", 0, 5), "features", 1, 2, 0.5, "accuracy", 0.9)
    report_epoch(epochs_of(bar, "rae", 2, 5), "rae", 3, 3, 0.1, "class_kept", 0.95)
    assert [(r.kind, r.epoch, r.epochs) for r in reports] == [("rae", 1, 5), ("rae", 5, 5)]
    assert [r.progress for r in reports] == [pytest.approx(0.2), pytest.approx(1.0)]
    assert reports[1].metric_name == "class_kept" and "rae epoch 5/5" in reports[1].message


def test_fan_out_tells_every_reporter_and_stops_when_one_does():
    first, second = [], []
    both = fan_out(recording(first), None, recording(second, stop_when=lambda report: True))
    with pytest.raises(CancelledError):
        both.report(0.1, "hello")
    assert [r.message for r in first] == [r.message for r in second] == ["hello"]
    assert fan_out(None, None) is None and fan_out(SILENT) is SILENT
