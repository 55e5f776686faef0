"""Reading Defuse runs back: a run of a kind, its models, its failures and cluster assignments, the
labelled failure set and the text report. Runs refer to their parent by id:

- ``defuse-identify``: failures streamed into the run's arrays (``failures/…``);
- ``defuse-distill`` (``config.identify_run``): clusters in the ``clusters`` table, the assignment
  of every failure in the arrays (``assignments``), the cached 2-D embedding (``embedding``);
  labels attach to its clusters;
- ``defuse-correct`` (``config.distill_run``): the results table, the λ sweeps and the corrected
  classifier, registered as a new model next to the original.
"""

from __future__ import annotations

import numpy as np

from probe_core.catalog import load_dataset
from probe_core.defuse.identification import FailureSet
from probe_core.defuse.labels import (
    DEFAULT_RHO,
    HUMAN,
    NONE_OF_THE_ABOVE,
    agreement_summary,
    cluster_label_table,
)
from probe_core.defuse.results import CORRECT, DISTILL, IDENTIFY
from probe_core.errors import ProbeError
from probe_core.reporting.export import npz_bytes
from probe_core.runs.history import require_run
from probe_core.store import ClusterRecord
from probe_core.team.accounts import Actor, Permission, local_owner, require

EMBEDDING_ARRAYS = "embedding"  # the distill run's arrays holding its failure map


def identify_run_of(store, distill_run):
    """The identification run a distillation run clustered; None if it is gone."""
    return store.get_run(int(distill_run.config.get("identify_run", -1)))


def clusters(store, distill_run: int) -> list[ClusterRecord]:
    """A distillation run's kept clusters, in index order."""
    return store.get_clusters(distill_run)


def cluster(store, cluster_id: int) -> ClusterRecord | None:
    return store.get_cluster(cluster_id)


def label_sources(store, distill_run: int) -> list[str]:
    """Who labelled a run's clusters: ``human`` and any ``oracle:MODEL``, sorted."""
    return sorted({label["source"] for found in clusters(store, distill_run)
                   for label in store.get_labels(cluster_id=found["id"])})


def review_labels_by(store, cluster_id: int, annotator: str | None) -> dict[int, str]:
    """``annotator``'s human labels of a cluster's review images: review image id -> label."""
    return {label["review_image_id"]: label["label"]
            for label in store.get_labels(cluster_id=cluster_id, source=HUMAN, per_image=True)
            if label["annotator"] == annotator}


def stored_embedding(store, distill_run: int) -> dict[str, np.ndarray] | None:
    """The run's failure map (the job's UMAP of the latent codes) if it was computed."""
    return store.get_arrays(distill_run, EMBEDDING_ARRAYS)


def run_models(store, run_id: int) -> dict:
    """``dataset``, ``classifier`` and ``vae`` ids behind an identification or distillation run."""
    run = store.get_run(run_id)
    if run is None:
        raise ProbeError(f"no run {run_id}")
    if run.kind == DISTILL:
        return run_models(store, int(run.config["identify_run"]))
    if run.kind != IDENTIFY:
        raise ProbeError(f"run {run_id} is a {run.kind!r} run, not a Defuse identification or distillation")
    info = run.result or run.details or {}
    if "classifier" not in info:
        raise ProbeError(f"identification run {run_id} ({run.status}) never got as far as loading its models")
    return {"dataset": info["dataset"], "classifier": info["classifier"], "vae": info["vae"]}


def run_dataset(store, run_id: int, data_dir=None):
    """The :class:`~probe_core.data.ImageDataset` a Defuse run was made on."""
    return load_dataset(run_models(store, run_id)["dataset"], data_dir)


def run_class_names(store, run_id: int, data_dir=None) -> tuple[str, ...]:
    """The class names of a Defuse run's data set (labels are stored by class name)."""
    return run_dataset(store, run_id, data_dir).class_names


def load_run_models(registry, store, run_id: int, device: str = "cpu"):
    """``(dataset, classifier, vae)`` of a Defuse run, loaded."""
    ids = run_models(store, run_id)
    dataset = registry.dataset(ids["dataset"])
    return dataset, registry.resolve(ids["classifier"], "classifier", ids["dataset"], device=device), \
        registry.resolve(ids["vae"], "generator", ids["dataset"], device=device)


def failures_of(store, run_id: int) -> FailureSet:
    """The failures behind an identification or distillation run."""
    run = store.get_run(run_id)
    identify_run = int(run.config["identify_run"]) if run is not None and run.kind == DISTILL else run_id
    return FailureSet.from_store(store, identify_run)


def assignments_of(store, distill_run: int) -> np.ndarray:
    """Kept-cluster index of every failure of the parent identification run (-1: no kept cluster)."""
    arrays = store.get_arrays(distill_run, "assignments")
    if arrays is None:
        raise ProbeError(f"run {distill_run} has no cluster assignments (did distillation finish?)")
    return arrays["cluster_index"]


def distill_tau(store, distill_run: int) -> float:
    """The review spread τ of a distillation run: the one asked for, else the one its data's size chose (in the
    result of a finished run)."""
    run = require_run(store, distill_run, DISTILL)
    tau = run.config.get("tau")
    if tau is None:
        tau = (run.result or {}).get("tau")
    if tau is None:
        raise ProbeError(f"run {distill_run} has not finished: its review spread τ is chosen when it ends")
    return float(tau)


def labelled_failure_set(store, distill_run: int, class_names: tuple[str, ...], source: str = HUMAN,
                         rho: float = DEFAULT_RHO) -> dict[str, np.ndarray]:
    """The individual failures in usable failure clusters, with their cluster's label.

    Returns arrays ``images`` (N, C, H, W) uint8, ``latents`` (N, D), ``labels`` (N,)
    class indices, ``cluster_id`` (N,), ``true_labels`` and ``predictions`` (N,).
    """
    rows = {r["cluster_index"]: r for r in cluster_label_table(store, distill_run, class_names, source, rho)
            if r["usable"]}
    failures = failures_of(store, distill_run)
    clusters = assignments_of(store, distill_run)
    keep = np.isin(clusters, list(rows))
    label_of = {index: class_names.index(row["label"]) for index, row in rows.items()}
    return {
        "images": failures.images[keep], "latents": failures.latents[keep],
        "labels": np.array([label_of[c] for c in clusters[keep]], dtype=np.int64),
        "cluster_id": np.array([rows[c]["id"] for c in clusters[keep]], dtype=np.int64),
        "true_labels": failures.true_labels[keep], "predictions": failures.predictions[keep],
    }


def labelled_failures_npz(store, distill_run: int, class_names: tuple[str, ...], source: str = HUMAN,
                          rho: float = DEFAULT_RHO, *, actor: Actor | None = None) -> tuple[bytes, int]:
    """:func:`labelled_failure_set` with ``class_names`` as a compressed ``.npz`` download, and how many failures
    it holds.

    Raises
    ------
    PermissionDenied
        Unless ``actor`` (default the local owner) may download exports.
    """
    require(actor or local_owner(), Permission.EXPORT)
    chosen = labelled_failure_set(store, distill_run, class_names, source, rho)
    return npz_bytes(**chosen, class_names=class_names), len(chosen["labels"])


def labelled_review_failures(store, distill_run: int, class_names: tuple[str, ...], source: str = HUMAN,
                             rho: float = DEFAULT_RHO) -> dict[str, np.ndarray]:
    """The individually labelled failures: review images whose majority label is a class that the
    classifier did not predict, each with its own label (the paper's baseline finetunes on these).

    Images from every cluster count, failure region or not. Returns ``images`` (N, C, H, W) float,
    ``latents`` (N, D), ``labels`` (N,) class indices, ``cluster_id`` (N,) and ``predictions`` (N,).
    """
    images, latents, labels, cluster_ids, predictions = [], [], [], [], []
    for row in cluster_label_table(store, distill_run, class_names, source, rho):
        stored = {image["id"]: image for image in store.get_review_images(row["id"])}
        for entry in row["per_image"]:
            majority = entry["majority"]
            if majority in (None, NONE_OF_THE_ABOVE) or majority == entry["prediction"]:
                continue
            image = stored[entry["review_image_id"]]
            images.append(image["image"])
            latents.append(image["z"])
            labels.append(class_names.index(majority))
            cluster_ids.append(row["id"])
            predictions.append(image["prediction"])
    if not images:
        return {"images": np.zeros((0,)), "latents": np.zeros((0,)), "labels": np.zeros((0,), dtype=np.int64),
                "cluster_id": np.zeros((0,), dtype=np.int64), "predictions": np.zeros((0,), dtype=np.int64)}
    return {"images": np.stack(images).astype(np.float32), "latents": np.stack(latents),
            "labels": np.array(labels, dtype=np.int64), "cluster_id": np.array(cluster_ids, dtype=np.int64),
            "predictions": np.array(predictions, dtype=np.int64)}


def report(store, distill_run: int, class_names: tuple[str, ...], source: str = HUMAN, rho: float = DEFAULT_RHO,
           correct_run: int | None = None) -> dict:
    """The scriptable summary of a Defuse run (``--out run.json``); accuracies are fractions.

    Keys: ``failures``, ``clusters`` (``id``, ``weight``, ``size``, ``majority_prediction``,
    ``majority_true_label``, ``is_failure``, ``label``, ``images_labelled``, ``agreement`` and
    ``agreement_se`` (per-image agreement, mean and standard error), ``annotators``,
    ``labelled_per``), ``agreement`` (the paper's Fig. 7 summary), ``results``
    (``before``/``defuse``/``baseline`` with ``test_accuracy`` and ``failure_accuracy``; the
    baseline's ``kind``), ``selection`` (the λ and epoch rule), ``corrected_model``, ``seconds`` and
    the run ids.
    """
    distill = require_run(store, distill_run, DISTILL)
    identify = store.get_run(int(distill.config["identify_run"]))
    name = lambda index: None if index is None else class_names[index]  # noqa: E731
    table = cluster_label_table(store, distill_run, class_names, source, rho)
    clusters = [
        {"id": r["id"], "cluster_index": r["cluster_index"], "weight": r["weight"], "size": r["size"],
         "majority_prediction": name(r.get("majority_prediction")),
         "majority_true_label": name(r.get("majority_true_label")),
         "is_failure": r["is_failure"], "label": r["label"], "images_labelled": r["images_labelled"],
         "images_disagreeing": r["images_disagreeing"], "agreement": r["agreement"],
         "agreement_se": r["agreement_se"], "annotators": r["annotators"], "labelled_per": r["labelled_per"]}
        for r in table
    ]
    out = {
        "failures": (identify.result or {}).get("failures", store.count_array_rows(identify.id, "failures/")),
        "clusters": clusters, "label_source": source, "rho": rho, "agreement": agreement_summary(table),
        "runs": {"identify": identify.id, "distill": distill_run, "correct": correct_run},
        "seconds": {"identify": (identify.result or {}).get("seconds"), "distill": (distill.result or {}).get("seconds"),
                    "correct": None},
        "results": None, "selection": None, "corrected_model": None,
    }
    if correct_run is not None:
        correct = require_run(store, correct_run, CORRECT)
        if correct.result:
            out["results"] = correct.result["results"]
            out["selection"] = correct.result.get("selection")
            out["corrected_model"] = correct.result["corrected_model"]
            out["seconds"]["correct"] = correct.result["seconds"]
            out["sweep"] = correct.result["sweep"]
            out["baseline_sweep"] = correct.result["baseline_sweep"]
    return out
