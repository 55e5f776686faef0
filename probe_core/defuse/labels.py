"""Labels of failure clusters: store them per review image, aggregate as Defuse does, auto-label, export.

Annotators label each of a cluster's review images (the paper's 10 samples, stored with
their latent codes) with a class or "none of the above". Aggregation follows Defuse
(Definition 3.2, Section 4.1):

- each image gets the majority label of its annotators (a tie gives it none);
- images whose majority is "none of the above" are discarded, like images without a majority;
- the cluster is a failure region when more than ρ of the remaining images' labels differ from
  the classifier's prediction for that image;
- the cluster's label is the majority over those images' labels.

Agreement (the paper's Fig. 7) is, per image, the share of its annotators voting for its
majority label; clusters report its mean and standard error over their images.

Human labels have ``source="human"``; an oracle's have ``source="oracle:MODEL"`` and are never
aggregated together with human ones. Workspaces from before per-image labels may hold one
label per annotator per cluster; those clusters are still aggregated the old way (a failure
vote and a class per annotator) and say so (``labelled_per == "cluster"``).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections import Counter
from pathlib import Path

import numpy as np

from probe_core.data.classes import class_index
from probe_core.errors import ProbeError, excerpt
from probe_core.reporting.export import spreadsheet_safe
from probe_core.store.labels import HUMAN
from probe_core.team.accounts import Actor, Permission, PermissionDenied, local_owner, require

NONE_OF_THE_ABOVE = "none"
DEFAULT_RHO = 0.5
REVIEW_IMAGES = 10  # the paper samples 10 images per cluster for its annotators
# Up to this many classes, labelling a cluster's images all at once is a button (and a digit key) per class; above
# it (43 sign classes) a row of buttons would fill the screen, and a searchable list of the names replaces it.
ONE_CLICK_CLASSES = 10


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


def label_images(store, review_image_ids: list[int], annotator: str, label: str | int,
                 class_names: tuple[str, ...], source: str = HUMAN, *, actor: Actor | None = None) -> list[int]:
    """Validate and store one annotator's label of review images at once (one transaction); returns row ids.

    One call with all of a cluster's images is the fast path ("all ten are a 9"); single images can
    then be changed with further calls. ``actor`` (default the local owner) must be allowed to label; a
    signed-in person labels under their own name only (an admin, who manages accounts, may name another, as
    the local owner and shell users do).

    Raises
    ------
    PermissionDenied
        When the actor may not label, or labels as someone else without managing accounts.
    """
    who = actor or local_owner()
    require(who, Permission.LABEL)
    if who.signed_in and annotator != who.name and not who.may(Permission.USERS):
        raise PermissionDenied(f"{who.name} may label only under their own name, not as {excerpt(annotator)}")
    if not review_image_ids:
        raise ProbeError("no review images to label")
    name = normalise_label(label, class_names)
    if name is None:
        raise ProbeError("give the class the image shows, or 'none' (none of the above)")
    return store.set_labels(annotator, [(int(i), name) for i in review_image_ids], source=source)


def strict_majority(votes: list) -> tuple[object | None, int]:
    """The most common vote if no other ties with it (else None), and its count."""
    if not votes:
        return None, 0
    ranked = Counter(votes).most_common()
    top = ranked[0][1]
    return (ranked[0][0] if len(ranked) == 1 or ranked[1][1] < top else None), top


def _mean_and_standard_error(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = float(np.mean(values))
    return mean, (float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None)


def aggregate_images(images: list[dict], labels: list[dict], class_names: tuple[str, ...],
                     rho: float = DEFAULT_RHO) -> dict:
    """Aggregate one cluster's per-image labels as the paper does (see the module docstring).

    Parameters
    ----------
    images : list of dict
        The cluster's review images (``id``, ``position``, ``prediction``: class index).
    labels : list of dict
        Per-image labels of one source (``review_image_id``, ``annotator``, ``label``: class name or "none").

    Returns
    -------
    dict
        ``annotators``; ``images_labelled``, ``images_decided`` (a class majority),
        ``images_disagreeing`` (decided and not the classifier's prediction); ``is_failure``
        (disagreeing / decided > ρ; None when nothing is decided); ``label`` (majority over the
        decided images; None on a tie); ``agreement`` and ``agreement_se`` (mean and standard
        error over labelled images of the share of annotators voting for the image's majority);
        ``image_agreements``; ``per_image`` (``review_image_id``, ``position``, ``prediction``,
        ``majority``, ``agreement``, ``votes``); ``usable``; ``labelled_per`` ("image").
    """
    votes_of: dict[int, list[str]] = {}
    for entry in labels:
        votes_of.setdefault(entry["review_image_id"], []).append(entry["label"])
    per_image, decided = [], []
    for image in images:
        votes = votes_of.get(image["id"], [])
        majority, top = strict_majority(votes)
        per_image.append({"review_image_id": image["id"], "position": image["position"],
                          "prediction": class_names[image["prediction"]], "majority": majority,
                          "agreement": top / len(votes) if votes else None, "votes": len(votes)})
        if majority is not None and majority != NONE_OF_THE_ABOVE:
            decided.append((majority, class_names[image["prediction"]]))
    disagreeing = sum(truth != predicted for truth, predicted in decided)
    label, _ = strict_majority([truth for truth, _ in decided])
    agreements = [entry["agreement"] for entry in per_image if entry["agreement"] is not None]
    agreement, agreement_se = _mean_and_standard_error(agreements)
    is_failure = None if not decided else disagreeing / len(decided) > rho
    return {
        "annotators": len({entry["annotator"] for entry in labels}),
        "images_labelled": len(agreements), "images_decided": len(decided), "images_disagreeing": disagreeing,
        "is_failure": is_failure, "label": label, "agreement": agreement, "agreement_se": agreement_se,
        "image_agreements": agreements, "per_image": per_image,
        "usable": bool(is_failure) and label is not None, "labelled_per": "image",
    }


def aggregate_cluster_votes(labels: list[dict], rho: float = DEFAULT_RHO) -> dict:
    """Aggregate whole-cluster labels (workspaces from before per-image labels), same keys as
    :func:`aggregate_images`: a failure when more than ρ of the annotators say so, the majority class
    as the label ("none" is not usable), agreement the share of annotators voting for it.
    """
    votes = [entry["is_failure"] for entry in labels if entry["is_failure"] is not None]
    named = [entry["label"] for entry in labels if entry["label"] is not None]
    label, top = strict_majority(named)
    agreement = top / len(named) if named else None
    return {
        "annotators": len({entry["annotator"] for entry in labels}),
        "images_labelled": 0, "images_decided": 0, "images_disagreeing": 0,
        "is_failure": None if not votes else sum(votes) / len(votes) > rho,
        "label": label, "agreement": agreement, "agreement_se": None,
        "image_agreements": [] if agreement is None else [agreement], "per_image": [],
        "usable": bool(votes) and sum(votes) / len(votes) > rho and label not in (None, NONE_OF_THE_ABOVE),
        "labelled_per": "cluster" if labels else None,
    }


def cluster_labels(store, cluster: dict, class_names: tuple[str, ...], source: str = HUMAN,
                   rho: float = DEFAULT_RHO) -> dict:
    """One cluster's aggregated labels of one source: per image when it has any, else whole-cluster labels."""
    per_image = store.get_labels(cluster_id=cluster["id"], source=source, per_image=True)
    if per_image:
        return aggregate_images(store.get_review_images(cluster["id"]), per_image, class_names, rho)
    return aggregate_cluster_votes(store.get_labels(cluster_id=cluster["id"], source=source, per_image=False), rho)


def cluster_label_table(store, distill_run: int, class_names: tuple[str, ...], source: str = HUMAN,
                        rho: float = DEFAULT_RHO) -> list[dict]:
    """Every cluster of a distillation run with its stored description and aggregated labels."""
    return [{"id": cluster["id"], "cluster_index": cluster["cluster_index"], "weight": cluster["weight"],
             "size": cluster["size"], **cluster["info"], **cluster_labels(store, cluster, class_names, source, rho)}
            for cluster in store.get_clusters(distill_run)]


def agreement_summary(rows: list[dict]) -> dict:
    """Annotator agreement as in the paper's Fig. 7: mean ± standard error over labelled images.

    Returns ``failure_regions``, ``other_clusters`` and ``all``, each a dict with ``mean``, ``se``
    and ``images`` (None means nothing labelled there), and ``clusters_labelled``.
    """
    def pooled(selected: list[dict]) -> dict:
        values = [value for row in selected for value in row["image_agreements"]]
        mean, se = _mean_and_standard_error(values)
        return {"mean": mean, "se": se, "images": len(values)}

    labelled = [r for r in rows if r["image_agreements"]]
    return {
        "failure_regions": pooled([r for r in labelled if r["is_failure"]]),
        "other_clusters": pooled([r for r in labelled if not r["is_failure"]]),
        "all": pooled(labelled),
        "clusters_labelled": len(labelled),
    }


def annotator_progress(store, distill_run_id: int, source: str = HUMAN) -> list[dict]:
    """Each annotator's progress on a run's review images, most images first.

    Returns
    -------
    list of dict
        ``annotator``, ``images_labelled``, ``clusters_complete`` (all of a cluster's review images
        labelled), ``relabels`` (changes of an earlier label, from the history) and ``last_labelled_at``.
    """
    clusters = store.get_clusters(distill_run_id)
    review_counts = {c["id"]: len(store.get_review_images(c["id"])) for c in clusters}
    per_annotator: dict[str, dict] = {}
    for cluster in clusters:
        for label in store.get_labels(cluster_id=cluster["id"], source=source, per_image=True):
            row = per_annotator.setdefault(label["annotator"], {"images": Counter(), "last": 0.0, "ids": set()})
            row["images"][cluster["id"]] += 1
            row["ids"].add(str(label["review_image_id"]))
            row["last"] = max(row["last"], label["created_at"])
    progress = []
    for annotator, row in per_annotator.items():
        changes = [h for h in store.label_history(item="review_image", annotator=annotator)
                   if h["source"] == source and h["item_id"] in row["ids"] and h["old_label"] is not None]
        progress.append({
            "annotator": annotator, "images_labelled": sum(row["images"].values()),
            "clusters_complete": sum(1 for cluster_id, count in row["images"].items()
                                     if count >= review_counts[cluster_id] > 0),
            "relabels": len(changes), "last_labelled_at": row["last"]})
    return sorted(progress, key=lambda r: (-r["images_labelled"], r["annotator"]))


def labels_csv(store, distill_run_id: int, *, actor: Actor | None = None) -> tuple[str, int]:
    """Every stored label of a run's clusters (all sources) as CSV text, and the number of rows.

    ``image`` is the review image's position (1 to 10), empty for a whole-cluster label. ``actor`` (default the
    local owner) must be allowed to download exports (PermissionDenied otherwise).
    """
    require(actor or local_owner(), Permission.EXPORT)
    clusters = {c["id"]: c for c in store.get_clusters(distill_run_id)}
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["cluster_id", "cluster_index", "image", "annotator", "source", "is_failure", "label",
                     "labelled_at"])
    count = 0
    for cluster_id, cluster in clusters.items():
        position = {image["id"]: image["position"] for image in store.get_review_images(cluster_id)}
        for label in store.get_labels(cluster_id=cluster_id):
            image = "" if label["review_image_id"] is None else position[label["review_image_id"]] + 1
            failure = "" if label["is_failure"] is None else ("yes" if label["is_failure"] else "no")
            when = dt.datetime.fromtimestamp(label["created_at"], dt.timezone.utc).isoformat(timespec="seconds")
            writer.writerow([spreadsheet_safe(cell) for cell in (
                cluster_id, cluster["cluster_index"], image, label["annotator"], label["source"], failure,
                label["label"] or "", when)])
            count += 1
    return buffer.getvalue(), count


def export_labels_csv(store, distill_run_id: int, path: str | Path) -> int:
    """Write :func:`labels_csv` to a file; returns the number of label rows."""
    text, count = labels_csv(store, distill_run_id)
    Path(path).write_text(text)
    return count
