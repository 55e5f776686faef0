"""What the dashboard uses of probe_core: the one door its pages go through.

The pages (``pages/views``) and their glue (``pages/ui``) import from here, from :mod:`probe_core.api`, and from the
query modules that read the store for them (:mod:`probe_core.runs.history`, :mod:`probe_core.bayestrex.queries`,
:mod:`probe_core.defuse.queries`, :mod:`probe_core.suites`), besides the error and permission types and the
figures they draw (:mod:`probe_core.errors`, :mod:`probe_core.team.accounts`, :mod:`probe_core.reporting.figures`,
:mod:`probe_core.reporting.render`); ``tests/unit/test_architecture.py`` refuses any other import. So a module
inside probe_core can move or split without touching a page: only this list follows it. Every name here is also
reachable from the CLI and the Python API, which call the same functions.

Names are grouped by what the pages do with them: choose data and models, start and follow runs, sample with
Bayes-TrEx, find, label and fix failures with Defuse, explain with saliency and scene counterfactuals.
"""

from __future__ import annotations

# -- data and the catalogue: the sidebar's choices --------------------------------------------------------------
from probe_core.catalog import (
    canonical_dataset_name,
    dataset_entry,
    generator_dataset,
    generator_source,
    list_datasets,
)
from probe_core.data import DATA_DIR_ENV, DEFAULT_DATASET, OPEN_DATASET_ENV, REAL_SIZE_LABEL, split_view
from probe_core.data.files import IMAGE_SIZE_RANGE, is_file_reference

# -- models: the Models page, checks and the workspace ----------------------------------------------------------
from probe_core.models import FD_HELP, FD_METRIC, GENERATOR_KINDS, KIND_WORDS, KINDS, ModelSpec
from probe_core.models.checks import ModelCheckError, check_classifier, check_generator, model_verdicts
from probe_core.models.devices import resolve_device
from probe_core.models.files import describe_linked_file
from probe_core.models.kept import KEPT_FOLDER
from probe_core.models.neighbours import NEIGHBOUR_MAJORITY
from probe_core.models.spec import MODEL_RANGES
from probe_core.sampling.protocols import prior_draws

# -- runs: start them (each in a worker process), read their requests and results --------------------------------
from probe_core.runs.jobs import JobManager
from probe_core.runs.lifecycle import submit as submit_run
from probe_core.runs.requests import SAMPLE_RANGES, SIGMA_RANGE, field_defaults
from probe_core.runs.runconfig import config_of, result_of
from probe_core.runs.scaleout import SHARDS_RANGE, check_executor
from probe_core.runs.training import start_default_training, submit_training
from probe_core.runs.workspace import Workspace, default_workspace_path

# -- Bayes-TrEx: targets, the sampler's page defaults, the paper's use cases, what a run found ---------------------
from probe_core.bayestrex import (
    TEST_IMAGE_VERDICTS,
    best_hit_per_target,
    best_samples,
    label_test_image,
    matrix_sampler_defaults,
    page_sampler_defaults,
    summary_rows,
)
from probe_core.bayestrex.compare import CompareRequest
from probe_core.bayestrex.latent_map import LATENT_MAP, sampling_report, stored_latent_map, submit_latent_map
from probe_core.bayestrex.recipes import (
    GENERATOR_KINDS_OF_USE_CASES,
    USE_CASES,
    comparison_table,
    plan_use_case,
    samples_to_label,
)
from probe_core.bayestrex.request import PATH_PAGE_DEFAULTS, SampleRequest
from probe_core.mcmc.diagnostics import POOR_MIXING_NOTE, mixing_ok
from probe_core.mcmc.driver import DEFAULT_INTEGRATION_STEPS, JUMPING_INTEGRATION_STEPS
from probe_core.sampling.targets import DEFAULT_SIGMA, SPEC_KINDS, PathKind, TargetSpec, report_classes, spec_help
from probe_core.reporting.export import npz_bytes, sample_arrays

# -- Defuse: identify and distill, label the review images, correct -------------------------------------------
from probe_core.defuse.cluster import (
    PROJECT_CODES_ABOVE,
    PROJECTED_CODE_SIZE,
    REAL_SIZE_REVIEW_TAU,
    REVIEW_TAU,
    review_tau,
)
from probe_core.defuse.correct_step import BASELINES, correction_plan
from probe_core.defuse.correction import REAL_SIZE_SELECTION, SELECTION_RULES, SMALL_IMAGE_SELECTION
from probe_core.defuse.embedding_step import submit_embedding
from probe_core.defuse.identification import DEFAULT_JUDGE_SURE, NOISE_MODES, REAL_SIZE_NOISE, SMALL_IMAGE_NOISE
from probe_core.defuse.identify_step import judge_advice, sized_identification
from probe_core.defuse.labels import (
    HUMAN,
    NONE_OF_THE_ABOVE,
    ONE_CLICK_CLASSES,
    REVIEW_IMAGES,
    agreement_summary,
    annotator_progress,
    cluster_label_table,
    cluster_labels,
    label_images,
    labels_csv,
)
from probe_core.defuse.results import EMBEDDING
from probe_core.defuse.review import (
    auto_label,
    duplicate_groups,
    nearest_misclassified_training,
    review_images,
    review_provenance,
    review_samples,
    review_sources,
)
from probe_core.defuse.steps import CorrectRequest, DistillRequest, IdentifyRequest, submit_step

# -- explanations: SmoothGrad and the scene world's counterfactuals -----------------------------------------------
from probe_core.reporting.saliency import overlay, smoothgrad
from probe_core.scenes.counterfactual import object_removal, removal_table
from probe_core.scenes.generator import SceneGenerator
from probe_core.scenes.world import SLOT

__all__ = [name for name in dir() if not name.startswith("_") and name != "annotations"]
