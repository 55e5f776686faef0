"""Adding checks to a suite (a labelled Defuse failure region's held-out samples, labelled Bayes-TrEx samples) and
retiring them; each added check is scored at once on the classifier it was found on."""

from __future__ import annotations

import numpy as np
import torch

from probe_core.catalog import generator_dataset
from probe_core.defuse.cluster import sample_cluster_latents
from probe_core.defuse.labels import DEFAULT_RHO, HUMAN, NONE_OF_THE_ABOVE, cluster_label_table, strict_majority
from probe_core.defuse.queries import DISTILL, distill_tau, load_run_models
from probe_core.errors import ProbeError
from probe_core.runs.history import require_run
from probe_core.suites.scoring import FINDING, NOVEL, REGION, class_names_of, classify, require_suite, score_check
from probe_core.team.accounts import Actor, Permission, local_owner, require

REGION_SAMPLES = 100
REGION_SEED = 1  # the review images use seed 0: the held-out samples are other draws of the same region


def _add(registry, store, suite: str, dataset: str, *, kind: str, name: str, classifier, class_names, evidence: dict,
         latents: np.ndarray, images: np.ndarray, labels: np.ndarray) -> int:
    """Store a check and score the classifier it was found on, for the registry's actor (who must manage suites)."""
    require(registry.actor or local_owner(), Permission.SUITES)
    if not len(labels):
        raise ProbeError("nothing to add: the check would hold no labelled images")
    images = np.asarray(images, dtype=np.float32)
    probs = classify(classifier, images)
    check_id = store.add_suite_check(
        suite, generator_dataset(dataset), kind=kind, name=name, found_on=classifier.id,
        evidence={**evidence, "class_names": list(class_names)},
        arrays={"images": images, "latents": np.asarray(latents, dtype=np.float32),
                "labels": np.asarray(labels, dtype=np.int64), "found_predictions": probs.argmax(1)})
    score = score_check(store.get_suite_check(check_id), probs)
    store.put_suite_scores(classifier.id, require_suite(store, suite)["version"], [score.as_row()])
    return check_id


def region_evidence(registry, store, distill_run: int, cluster_id: int, *, source: str = HUMAN,
                    rho: float = DEFAULT_RHO, samples: int = REGION_SAMPLES, device: str = "cpu") -> dict:
    """A labelled failure region's held-out samples, before they become a check.

    Returns ``latents`` (S, D), ``images`` (S, C, H, W), ``labels`` (S,) class indices (the
    region's label), ``classifier`` and ``vae`` (loaded), ``dataset``, ``class_names`` and the
    cluster's ``row`` of :func:`~probe_core.defuse.labels.cluster_label_table`.

    Raises
    ------
    ProbeError
        If the cluster is not in the run, or its labels (of ``source``) do not make it a failure
        region with a label.
    """
    context = _RegionContext(registry, store, distill_run, source, rho, device)
    return context.evidence(context.row(cluster_id), samples)


class _RegionContext:
    """What every region of one distillation run shares: its models and its label table, loaded once."""

    def __init__(self, registry, store, distill_run: int, source: str, rho: float, device: str) -> None:
        require_run(store, distill_run, DISTILL)
        self.store, self.distill_run, self.source, self.device = store, distill_run, source, device
        self.dataset, self.classifier, self.vae = load_run_models(registry, store, distill_run, device)
        self.names = tuple(self.classifier.class_names or self.dataset.class_names)
        self.rows = {row["id"]: row for row in cluster_label_table(store, distill_run, self.names, source, rho)}

    def usable_ids(self) -> list[int]:
        """Cluster ids of the run's labelled failure regions."""
        return [cluster_id for cluster_id, row in self.rows.items() if row["usable"]]

    def row(self, cluster_id: int) -> dict:
        """The cluster's label-table row; a :class:`ProbeError` if it is not a labelled failure region of the run."""
        regions = f"the run's labelled failure regions: {', '.join(map(str, self.usable_ids())) or 'none yet'}"
        if cluster_id not in self.rows:
            raise ProbeError(f"cluster {cluster_id} is not in Defuse run {self.distill_run}; {regions}")
        row = self.rows[cluster_id]
        if not row["usable"]:
            raise ProbeError(f"cluster {cluster_id} is not a labelled failure region ({row['images_labelled']} "
                             f"images labelled by {self.source}): label its images first (Label page or "
                             f"`probe defuse label`); {regions}")
        return row

    def evidence(self, row: dict, samples: int) -> dict:
        """The region's held-out samples (seeded by the cluster, so the same on every call)."""
        cluster = self.store.get_cluster(row["id"])
        rng = np.random.default_rng([REGION_SEED, row["id"]])
        latents = sample_cluster_latents(cluster["mean"], cluster["covariance"], samples,
                                         distill_tau(self.store, self.distill_run), rng)
        with torch.no_grad():
            images = self.vae.module.decode(torch.from_numpy(latents).float().to(self.device)).cpu().numpy()
        return {"latents": latents, "images": images, "labels": np.full(samples, self.names.index(row["label"])),
                "classifier": self.classifier, "vae": self.vae, "dataset": self.dataset.name,
                "class_names": self.names, "row": row}


def add_region_check(registry, store, suite: str, distill_run: int, cluster_id: int, *, source: str = HUMAN,
                     rho: float = DEFAULT_RHO, samples: int = REGION_SAMPLES, name: str | None = None,
                     device: str = "cpu") -> int:
    """Add a labelled Defuse failure region to a suite (created when it does not exist); returns the check id.

    The check holds :func:`region_evidence`'s held-out samples; errors are that function's.
    """
    return add_region_checks(registry, store, suite, distill_run, [cluster_id], source=source, rho=rho,
                             samples=samples, name=name, device=device)[0]


def labelled_region_ids(registry, store, distill_run: int, source: str = HUMAN, rho: float = DEFAULT_RHO,
                        device: str = "cpu") -> list[int]:
    """The cluster ids of a Defuse run's labelled failure regions (those a suite check can be made of)."""
    return list(_RegionContext(registry, store, distill_run, source, rho, device).usable_ids())


def add_region_checks(registry, store, suite: str, distill_run: int, cluster_ids: list[int], *,
                      all_regions: bool = False, source: str = HUMAN, rho: float = DEFAULT_RHO,
                      samples: int = REGION_SAMPLES, name: str | None = None, device: str = "cpu") -> list[int]:
    """Add several labelled failure regions of one run to a suite, one check each; returns the check ids.

    ``all_regions`` adds every labelled failure region of the run besides ``cluster_ids``. The
    run's models and label table are loaded once, and every cluster is checked before anything is
    stored, so a bad cluster id leaves the suite as it was.

    Raises
    ------
    ProbeError
        If a cluster is not a labelled failure region of the run (the message lists those that
        are), or there is nothing to add.
    """
    context = _RegionContext(registry, store, distill_run, source, rho, device)
    cluster_ids = list(dict.fromkeys([*cluster_ids, *(context.usable_ids() if all_regions else [])]))
    if not cluster_ids:
        raise ProbeError(f"Defuse run {distill_run} has no labelled failure regions ({source} labels) yet: "
                         f"label its clusters' images first (Label page or `probe defuse label`)")
    rows = [context.row(cluster_id) for cluster_id in cluster_ids]
    added = []
    for row in rows:
        region = context.evidence(row, samples)
        added.append(_add(
            registry, store, suite, region["dataset"], kind=REGION, classifier=region["classifier"],
            class_names=region["class_names"],
            name=name or f"Defuse run {distill_run}, region {row['cluster_index'] + 1}: {row['label']}",
            evidence={"distill_run": distill_run, "cluster_id": row["id"], "label": row["label"],
                      "label_source": source, "annotators": row["annotators"], "agreement": row["agreement"],
                      "generator": region["vae"].id},
            latents=region["latents"], images=region["images"], labels=region["labels"]))
    return added


def labelled_samples(store, run_id: int, sample_ids: list[int] | None = None, source: str = HUMAN,
                     require_all: bool = True, samples: list[dict] | None = None) -> list[dict]:
    """A run's samples with a majority label of ``source`` (``label``), optionally only ``sample_ids``.

    With ``sample_ids`` and ``require_all``, a sample without a majority label is an error.
    ``samples``: the run's samples when the caller has them already (a page), else they are read.
    """
    wanted = None if sample_ids is None else set(sample_ids)
    labels = store.sample_labels(run_id, source)
    chosen = []
    for sample in store.get_samples(run_id) if samples is None else samples:
        if wanted is not None and sample["id"] not in wanted:
            continue
        label, _ = strict_majority([vote for vote in labels.get(sample["id"], []) if vote])
        if label is not None:
            chosen.append({**sample, "label": label})
    if wanted is not None and require_all:
        missing = wanted - {s["id"] for s in chosen}
        if missing:
            raise ProbeError(f"samples {', '.join(map(str, sorted(missing)))} are not labelled samples of run "
                             f"{run_id} (label them first: Probe page, Compare, or `probe label sample`)")
    return chosen


def add_finding_checks(registry, store, suite: str, run_id: int, sample_ids: list[int] | None = None, *,
                       source: str = HUMAN, name: str | None = None, device: str = "cpu") -> list[int]:
    """Add the labelled samples of a Bayes-TrEx run (probe or compare) to a suite; returns the check ids.

    One check per classifier the samples were found on (a comparison run has two). Without
    ``sample_ids``, every sample of the run with a majority label is taken.
    """
    run = store.get_run(run_id)
    if run is None or run.kind not in ("sample", "compare"):
        raise ProbeError(f"run {run_id} is not a Bayes-TrEx run (probe or compare)")
    if not run.result:
        raise ProbeError(f"run {run_id} has not finished ({run.status})")
    chosen = labelled_samples(store, run_id, sample_ids, source)
    if not chosen:
        raise ProbeError(f"run {run_id} has no labelled samples yet: label some (Probe page, Compare, or "
                         f"`probe label sample ID --annotator A --label C`)")
    if run.kind == "compare":
        classifiers, per_side = run.result["classifiers"], len(run.result["class_names"])
        side_of = lambda sample: sample["target_index"] // per_side  # noqa: E731
    else:
        classifiers, side_of = [run.result["classifier"]], (lambda sample: 0)
    dataset = run.result.get("dataset") or run.config["dataset"]
    descriptions = {index: entry.get("description", entry.get("spec", "")) for index, entry in
                    enumerate(run.result.get("targets", []))}
    planned = []  # every side is checked before anything is stored
    for side, classifier_id in enumerate(classifiers):
        mine = [sample for sample in chosen if side_of(sample) == side]
        if not mine:
            continue
        classifier = registry.resolve(classifier_id, "classifier", dataset, device)
        names = class_names_of(classifier, dataset, registry.data_dir)
        unknown = sorted({s["label"] for s in mine} - set(names) - {NONE_OF_THE_ABOVE})
        if unknown:
            raise ProbeError(f"labels {', '.join(unknown)} are not classes of {classifier.id} ({', '.join(names)})")
        planned.append((classifier, names, mine))
    check_ids = []
    for classifier, names, mine in planned:
        targets = sorted({descriptions.get(s["target_index"], str(s["target_index"])) for s in mine})
        check_ids.append(_add(
            registry, store, suite, dataset, kind=FINDING, classifier=classifier, class_names=names,
            name=name or f"run {run_id} ({'; '.join(targets)[:80]}): {len(mine)} labelled samples",
            evidence={"run": run_id, "run_kind": run.kind, "targets": targets, "sample_ids": [s["id"] for s in mine],
                      "label_source": source, "generator": run.result.get("generator")},
            latents=np.stack([s["z"] for s in mine]), images=np.stack([s["image"] for s in mine]),
            labels=np.array([NOVEL if s["label"] == NONE_OF_THE_ABOVE else names.index(s["label"]) for s in mine])))
    return check_ids


def retire_check(store, suite_name: str, check_id: int, *, actor: Actor | None = None) -> int:
    """Take a check out of a suite from its next version on (its evidence and scores are kept); returns
    the suite's new version.

    Raises
    ------
    ProbeError
        If the suite has no such check.
    PermissionDenied
        Unless ``actor`` (default the local owner) manages suites.
    """
    require(actor or local_owner(), Permission.SUITES)
    check = store.get_suite_check(check_id, with_data=False)
    suite = store.get_suite(suite_name)
    if check is None or suite is None or check["suite_id"] != suite["id"]:
        raise ProbeError(f"suite {suite_name!r} has no check {check_id}")
    store.retire_suite_check(check_id)
    return int(store.get_suite(suite_name)["version"])
