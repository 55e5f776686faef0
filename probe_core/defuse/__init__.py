"""Defuse (Slack et al.): identify failures by perturbing VAE codes, distil them into clusters, label, correct.

- :mod:`~probe_core.defuse.identification`: Algorithm 1 with ``paper`` or ``centered`` Beta noise.
- :mod:`~probe_core.defuse.cluster`: :class:`FailureClusterer` (Dirichlet-process GMM) and the 2-D map.
- :mod:`~probe_core.defuse.labels`: store, aggregate (ρ, agreement), oracle labels, CSV export.
- :mod:`~probe_core.defuse.correction`: L(D) + λ·CE(D_f) finetuning over a λ sweep, and the baseline.
- the steps as stored runs, a request and its job each: :mod:`~probe_core.defuse.identify_step`,
  :mod:`~probe_core.defuse.distill_step`, :mod:`~probe_core.defuse.correct_step` (and the failure map's
  :mod:`~probe_core.defuse.embedding_step`); :mod:`~probe_core.defuse.steps` runs one now or submits it;
- :mod:`~probe_core.defuse.queries`: reading runs back; :mod:`~probe_core.defuse.review`: review samples,
  the cached failure map, oracle labels.

The notebook verbs :func:`identify`, :func:`distill`, :func:`label` and :func:`correct` (``mp.defuse.…``)
are in :mod:`~probe_core.defuse.verbs`; the ``probe defuse`` commands in :mod:`probe_core.cli.defuse`.
"""

from probe_core.defuse.cluster import FailureClusterer
from probe_core.defuse.identification import FailureSet, identify_failures
from probe_core.defuse.verbs import DefuseReport, IdentifyResult, correct, distill, identify, label

__all__ = ["DefuseReport", "FailureClusterer", "FailureSet", "IdentifyResult", "correct", "distill", "identify",
           "identify_failures", "label"]
