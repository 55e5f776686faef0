"""The Defuse pipeline in one namespace: what the pages, the CLI and scripts call.

It gathers three modules, each one hop away:

- :mod:`~probe_core.defuse.steps`: the steps' settings (with their run kinds), their jobs, and
  running them (:func:`run_step` inline, :func:`submit_step` in the background);
- :mod:`~probe_core.defuse.queries`: reading runs back (models, failures, assignments, the
  labelled failure set, the report);
- :mod:`~probe_core.defuse.review`: review samples and the stored review images that annotators
  label, the cached failure map, oracle labels.

Stored runs name their job builders here (``probe_core.defuse.pipeline:identify_job``), so these
names stay importable from this module.
"""

from probe_core.defuse.correct import PAPER_LAMBDAS, SELECTION_RULES
from probe_core.defuse.queries import (
    CORRECT,
    DISTILL,
    EMBEDDING,
    IDENTIFY,
    assignments_of,
    distill_tau,
    failures_of,
    labelled_failure_set,
    labelled_review_failures,
    load_run_models,
    report,
    require_run,
    run_class_names,
    run_models,
)
from probe_core.defuse.review import (
    auto_label,
    embedding,
    nearest_misclassified_training,
    review_images,
    review_samples,
)
from probe_core.defuse.steps import (
    BASELINES,
    CorrectSettings,
    DistillSettings,
    EmbeddingSettings,
    IdentifySettings,
    checked_identify_settings,
    correct_job,
    corrected_model_record,
    distill_job,
    embedding_job,
    find_failures_job,
    identify_job,
    run_step,
    settings_dict,
    submit_embedding,
    submit_find_failures,
    submit_step,
)

__all__ = [
    "BASELINES",
    "PAPER_LAMBDAS",
    "SELECTION_RULES",
    "CORRECT",
    "CorrectSettings",
    "DISTILL",
    "DistillSettings",
    "EMBEDDING",
    "EmbeddingSettings",
    "IDENTIFY",
    "IdentifySettings",
    "assignments_of",
    "auto_label",
    "checked_identify_settings",
    "correct_job",
    "corrected_model_record",
    "distill_job",
    "distill_tau",
    "embedding",
    "embedding_job",
    "failures_of",
    "find_failures_job",
    "identify_job",
    "labelled_failure_set",
    "labelled_review_failures",
    "load_run_models",
    "nearest_misclassified_training",
    "report",
    "require_run",
    "run_class_names",
    "review_images",
    "review_samples",
    "run_models",
    "run_step",
    "settings_dict",
    "submit_embedding",
    "submit_find_failures",
    "submit_step",
]
