"""Former home of the Bayes-TrEx use cases and jobs, kept so that stored runs and scripts still resolve.

Stored runs name their job builders by dotted path (``probe_core.usecases:sampling_job``); the
code now lives in :mod:`probe_core.bayestrex.recipes` and :mod:`probe_core.bayestrex.jobs`.
"""

from probe_core.bayestrex.jobs import (
    LiveTrace,
    compare_job,
    sampling_job,
)
from probe_core.bayestrex.recipes import (
    compare_classifiers,
    comparison_table,
    high_confidence_misclassification,
    novel_class_extrapolation,
    probe_target,
    samples_to_label,
)

__all__ = [
    "LiveTrace",
    "compare_classifiers",
    "compare_job",
    "comparison_table",
    "high_confidence_misclassification",
    "novel_class_extrapolation",
    "probe_target",
    "samples_to_label",
    "sampling_job",
]
