"""Bayes-TrEx (Booth et al., AAAI 2021): in-distribution inputs at a target confidence, with named parts.

- :mod:`~probe_core.bayestrex.run`: check sampler settings and :func:`sample` targets in one batch,
  streaming kept samples to the store (the target language is :mod:`probe_core.sampling.targets`, the
  samplers :mod:`probe_core.sampling`);
- :mod:`~probe_core.bayestrex.summary`: Table 2 figures, the test-set baseline, status, what to show;
- :mod:`~probe_core.bayestrex.recipes`: the paper's use cases (misclassification, novel class,
  classifier comparison with human labels);
- :mod:`~probe_core.bayestrex.jobs`: sampling as a run kind (a background job with the live trace);
- :mod:`~probe_core.bayestrex.compare`: the classifier comparison's run kind.
"""

from probe_core.bayestrex.compare import CompareRequest, compare_job
from probe_core.bayestrex.jobs import LiveTrace, sampling_job
from probe_core.bayestrex.recipes import (
    compare_classifiers,
    comparison_table,
    high_confidence_misclassification,
    novel_class_extrapolation,
    probe_target,
    samples_to_label,
)
from probe_core.bayestrex.request import (
    LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS,
    MATRIX_SAMPLER_DEFAULTS,
    MAX_CHAINS,
    MAX_ITERATIONS,
    PAGE_SAMPLER_DEFAULTS,
    REAL_SIZE_SAMPLER_DEFAULTS,
    SAMPLER_DEFAULTS,
    SAMPLERS,
    SMALL_IMAGE_VALUES,
    check_sampler_settings,
    matrix_sampler_defaults,
    page_sampler_defaults,
    sampler_defaults,
)
from probe_core.bayestrex.run import sample
from probe_core.bayestrex.summary import (
    MISTAKE_CONFIDENCE,
    TEST_IMAGE_VERDICTS,
    best_hit_per_target,
    best_samples,
    label_test_image,
    prior_norm_interval,
    summarise_target,
    summary_rows,
    table2,
    target_status,
    test_set_baseline,
)

__all__ = [
    "LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS", "MATRIX_SAMPLER_DEFAULTS", "PAGE_SAMPLER_DEFAULTS", "SAMPLER_DEFAULTS",
    "REAL_SIZE_SAMPLER_DEFAULTS", "matrix_sampler_defaults", "page_sampler_defaults",
    "sampler_defaults",
    "MISTAKE_CONFIDENCE",
    "TEST_IMAGE_VERDICTS",
    "label_test_image",
    "LiveTrace",
    "MAX_CHAINS",
    "MAX_ITERATIONS",
    "SAMPLERS",
    "SMALL_IMAGE_VALUES",
    "best_hit_per_target",
    "best_samples",
    "check_sampler_settings",
    "CompareRequest",
    "compare_classifiers",
    "compare_job",
    "comparison_table",
    "high_confidence_misclassification",
    "novel_class_extrapolation",
    "prior_norm_interval",
    "probe_target",
    "sample",
    "samples_to_label",
    "sampling_job",
    "summarise_target",
    "summary_rows",
    "table2",
    "target_status",
    "test_set_baseline",
]
