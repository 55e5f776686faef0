"""Cluster labels: store them, aggregate annotators, auto-label with an oracle, export.

Human labels have ``source="human"``; an oracle's have ``source="oracle:MODEL"``
and are never aggregated together with human ones. Aggregation follows Defuse:
a cluster is a failure region when more than ρ of its annotators say so, its
label is the majority label, and "none of the above" clusters are not used for
correction. Agreement is the share of annotators voting with the majority label
(the paper's agreement table).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from probe_core.classes import class_index
from probe_core.errors import ProbeError

NONE_OF_THE_ABOVE = "none"
HUMAN = "human"
DEFAULT_RHO = 0.5


def oracle_source(model_id: str) -> str:
    """The label source recorded for an oracle model's automatic labels."""
    return f"oracle:{model_id}"


def normalise_label(label: str | int | None, class_names: tuple[str, ...]) -> str | None:
    """A class given by name or index, ``"none"`` for none of the above, or None; returns the class name.

    Raises
    ------
    ProbeError
        If the class is unknown (the message lists the valid ones).
    """
    if label is None:
        return None
    text = str(label).strip()
    if text.lower() in (NONE_OF_THE_ABOVE, "none of the above"):
        return NONE_OF_THE_ABOVE
    try:
        return class_names[class_index(text, class_names)]
    except ProbeError as exc:
        raise ProbeError(f"{exc} or 'none' (none of the above)") from None


def label_cluster(store, cluster_id: int, annotator: str, *, is_failure: bool | None, label: str | int | None,
                  class_names: tuple[str, ...], source: str = HUMAN) -> int:
    """Validate and store one annotator's label of a cluster at once; returns the label's row id."""
    if store.get_cluster(cluster_id) is None:
        raise ProbeError(f"no cluster {cluster_id}")
    if is_failure is None and label is None:
        raise ProbeError("give whether it is a failure, the correct class, or both")
    return store.set_label(annotator, cluster_id=cluster_id, label=normalise_label(label, class_names),
                           is_failure=is_failure, source=source)


def aggregate(labels: list[dict], rho: float = DEFAULT_RHO) -> dict:
    """Aggregate one cluster's labels (each annotator once, as the store keeps them).

    Returns
    -------
    dict
        ``annotators``; ``failure_votes`` and ``is_failure`` (share of failure
        votes > ρ; None without votes); ``label`` (the majority class name,
        ``"none"``, or None without a strict majority); ``agreement`` (share of
        labelling annotators voting for the majority label); ``usable`` (a failure
        with a class label, so it can be used for correction).
    """
    votes = [entry["is_failure"] for entry in labels if entry["is_failure"] is not None]
    named = [entry["label"] for entry in labels if entry["label"] is not None]
    is_failure = None if not votes else sum(votes) / len(votes) > rho
    label, agreement = None, None
    if named:
        ranked = Counter(named).most_common()
        top_count = ranked[0][1]
        agreement = top_count / len(named)
        if len(ranked) == 1 or ranked[1][1] < top_count:
            label = ranked[0][0]
    return {
        "annotators": len({entry["annotator"] for entry in labels}),
        "failure_votes": int(sum(votes)),
        "votes": len(votes),
        "is_failure": is_failure,
        "label": label,
        "agreement": agreement,
        "usable": bool(is_failure) and label not in (None, NONE_OF_THE_ABOVE),
    }


def cluster_label_table(store, distill_run_id: int, source: str = HUMAN, rho: float = DEFAULT_RHO) -> list[dict]:
    """Every cluster of a distillation run with its stored description and aggregated labels."""
    rows = []
    for cluster in store.get_clusters(distill_run_id):
        labels = store.get_labels(cluster_id=cluster["id"], source=source)
        rows.append({"id": cluster["id"], "cluster_index": cluster["cluster_index"], "weight": cluster["weight"],
                     "size": cluster["size"], **cluster["info"], **aggregate(labels, rho)})
    return rows


def agreement_summary(rows: list[dict]) -> dict:
    """Mean annotator agreement over failure clusters, other clusters, and all labelled clusters."""
    def mean(values):
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    labelled = [r for r in rows if r["agreement"] is not None]
    return {
        "failure_regions": mean([r["agreement"] for r in labelled if r["is_failure"]]),
        "other_regions": mean([r["agreement"] for r in labelled if not r["is_failure"]]),
        "all": mean([r["agreement"] for r in labelled]),
        "clusters_labelled": len(labelled),
    }


@torch.no_grad()
def oracle_labels(oracle: torch.nn.Module, classifier: torch.nn.Module, images: torch.Tensor, rho: float = DEFAULT_RHO,
                  min_share: float = 0.5) -> dict:
    """What an oracle classifier says about one cluster's review samples.

    Parameters
    ----------
    images : torch.Tensor
        (S, C, H, W) decoded samples of the cluster.
    min_share : float
        The oracle's majority class must cover more than this share of the samples,
        otherwise it answers "none of the above".

    Returns
    -------
    dict
        ``label`` (class index or None for none of the above), ``is_failure``
        (oracle and classifier disagree on more than ρ of the samples), ``share``.
    """
    oracle_predictions = oracle(images).argmax(1)
    classifier_predictions = classifier(images).argmax(1)
    counts = torch.bincount(oracle_predictions)
    winner = int(counts.argmax())
    share = float(counts[winner]) / len(images)
    disagreement = float((oracle_predictions != classifier_predictions).float().mean())
    return {"label": winner if share > min_share else None, "is_failure": disagreement > rho, "share": share,
            "disagreement": disagreement}


def labels_csv(store, distill_run_id: int) -> tuple[str, int]:
    """Every stored label of a run's clusters (all sources) as CSV text, and the number of rows."""
    clusters = {c["id"]: c for c in store.get_clusters(distill_run_id)}
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["cluster_id", "cluster_index", "annotator", "source", "is_failure", "label", "labelled_at"])
    count = 0
    for cluster_id, cluster in clusters.items():
        for label in store.get_labels(cluster_id=cluster_id):
            failure = "" if label["is_failure"] is None else ("yes" if label["is_failure"] else "no")
            when = dt.datetime.fromtimestamp(label["created_at"], dt.timezone.utc).isoformat(timespec="seconds")
            writer.writerow([cluster_id, cluster["cluster_index"], label["annotator"], label["source"], failure,
                             label["label"] or "", when])
            count += 1
    return buffer.getvalue(), count


def export_labels_csv(store, distill_run_id: int, path: str | Path) -> int:
    """Write :func:`labels_csv` to a file; returns the number of label rows."""
    text, count = labels_csv(store, distill_run_id)
    Path(path).write_text(text)
    return count
