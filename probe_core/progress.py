"""How long work tells its progress and learns that it should stop: the one protocol, at the lowest floor.

Every long step takes a :class:`Reporter` (or None) and calls ``report(fraction, message, details)`` between its
steps: model training after each epoch, Defuse's identification after each batch, its correction after each
epoch of each λ, the shard executors as shards advance, the sampler every ``report_every`` iterations. Once
the run was asked to stop, ``report`` raises :class:`~probe_core.errors.CancelledError`: work that may simply
end lets it rise; work that ends gracefully catches it where it can end and keep what it has (the sampler's run
loop ends its chains there, an executor returns the shards that were done). ``stop_requested()`` asks without
raising, for work that polls between steps that do not report.

A job's :class:`~probe_core.runs.lifecycle.JobContext` is a reporter (its reports go to the runs table, where
the pages read them); so are the progress bars of the CLI and the API (:mod:`probe_core.runs.progress`), a
shard's (:class:`CallbackReporter`) and a stage's share of a larger step (:func:`stage`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from probe_core.errors import CancelledError


class Reporter(Protocol):
    """Progress out, a stop in: see the module's description."""

    def report(self, progress: float | None = None, message: str | None = None, details: dict | None = None,
               force: bool = False) -> None:
        """Record progress in [0, 1] (None: unchanged), a message and details; raise
        :class:`~probe_core.errors.CancelledError` if the run was asked to stop. ``force`` records it even where
        reports are throttled (a step's last one)."""

    def stop_requested(self) -> bool:
        """Whether the run was asked to stop."""


ReportCallback = Callable[[float | None, str | None, dict | None], None]


def _never() -> bool:
    return False


@dataclass
class CallbackReporter:
    """A :class:`Reporter` over two callables: ``on_report(progress, message, details)`` sees every report
    (progress clamped to [0, 1]), and ``should_stop()`` says when the run was asked to stop.

    Tests record reports with it (``CallbackReporter(lambda *report: seen.append(report))``); a shard's reporter
    sends its fraction to the executor's board with it.
    """

    on_report: ReportCallback | None = None
    should_stop: Callable[[], bool] = field(default=_never)

    def report(self, progress: float | None = None, message: str | None = None, details: dict | None = None,
               force: bool = False) -> None:
        if self.on_report is not None:
            self.on_report(None if progress is None else min(max(float(progress), 0.0), 1.0), message, details)
        if self.should_stop():
            raise CancelledError("stopped")

    def stop_requested(self) -> bool:
        return bool(self.should_stop())


# One report's arguments: ``(progress, message, details, force)``.
Report = tuple[float | None, str | None, dict | None, bool]
Rewrite = Callable[[float | None, str | None, dict | None, bool], "Report | None"]


@dataclass
class _Rewritten:
    reporter: Reporter
    rewrite: Rewrite

    def report(self, progress: float | None = None, message: str | None = None, details: dict | None = None,
               force: bool = False) -> None:
        rewritten_report = self.rewrite(progress, message, details, force)
        if rewritten_report is not None:
            self.reporter.report(*rewritten_report)

    def stop_requested(self) -> bool:
        return self.reporter.stop_requested()


def rewritten(reporter: Reporter | None, rewrite: Rewrite) -> Reporter | None:
    """``reporter`` seeing each report as ``rewrite(progress, message, details, force)`` makes it (a
    :data:`Report`; None: the report is dropped), and asking ``reporter`` whether to stop. A part of a longer step
    reports through it in the whole step's terms (:func:`stage`, a generator's epochs after its feature network's,
    one λ of a sweep, one side of a comparison, a model trained inside a run). None stays None."""
    return None if reporter is None else _Rewritten(reporter, rewrite)


def stage(reporter: Reporter | None, start: float, end: float) -> Reporter | None:
    """``reporter`` for one stage of a longer step, which covers ``[start, end]`` of its progress (a VAE's feature
    network, then the VAE; Defuse's correction, then its baseline): fraction ``f`` reports as
    ``start + f * (end - start)``. None stays None."""
    def scaled(progress, message, details, force):
        if progress is not None:
            progress = start + min(max(float(progress), 0.0), 1.0) * (end - start)
        return progress, message, details, force

    return rewritten(reporter, scaled)


def stop_requested(reporter: Reporter | None) -> bool:
    """Whether ``reporter`` (None: never) says the run was asked to stop."""
    return reporter is not None and reporter.stop_requested()


@dataclass
class _FanOut:
    reporters: tuple

    def report(self, progress: float | None = None, message: str | None = None, details: dict | None = None,
               force: bool = False) -> None:
        for reporter in self.reporters:
            reporter.report(progress, message, details, force=force)

    def stop_requested(self) -> bool:
        return any(reporter.stop_requested() for reporter in self.reporters)


def fan_out(*reporters: Reporter | None) -> Reporter | None:
    """One reporter telling each of ``reporters`` (Nones left out) every report; it asks to stop when one does."""
    present = tuple(reporter for reporter in reporters if reporter is not None)
    return None if not present else present[0] if len(present) == 1 else _FanOut(present)


# A reporter that tells nobody and never stops: training with it is not announced (a registry announces training
# only where no reporter is given).
SILENT: Reporter = CallbackReporter()
