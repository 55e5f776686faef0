"""What people and oracles look at: review samples of a cluster, the cached 2-D failure map, and
oracle labels (demos and tests only).
"""

from __future__ import annotations

import numpy as np

from probe_core.data import clean_dataset_name
from probe_core.defuse.cluster import (
    decode_and_classify,
    embed_2d,
    sample_cluster_latents,
)
from probe_core.defuse.identify import encode_means
from probe_core.defuse.labels import (
    DEFAULT_RHO,
    NONE_OF_THE_ABOVE,
    oracle_labels,
    oracle_source,
)
from probe_core.defuse.queries import (
    assignments_of,
    distill_tau,
    failures_of,
    load_run_models,
)
from probe_core.errors import ProbeError


def review_samples(vae, classifier, cluster: dict, count: int = 10, tau: float = 0.5, seed: int = 0) -> dict:
    """``count`` decoded samples of N(μ, τ·Σ) for a cluster with the classifier's probabilities.

    Returns ``latents`` (S, D), ``images`` (S, C, H, W) and ``probs`` (S, K), deterministic for a seed.
    """
    rng = np.random.default_rng([seed, int(cluster["id"])])
    latents = sample_cluster_latents(cluster["mean"], cluster["covariance"], count, tau, rng)
    images, probs = decode_and_classify(vae.module, classifier.module, latents)
    return {"latents": latents, "images": images, "probs": probs}


def embedding(registry, store, distill_run: int, max_fit: int = 5000, max_points: int = 100_000,
              seed: int = 0) -> dict:
    """2-D UMAP embedding of training codes and failures of a distillation run, computed once and cached.

    Returns plain arrays: ``train_xy`` (N, 2), ``train_labels`` (N,), ``failure_xy`` (M, 2),
    ``failure_cluster`` (M,), ``failure_index`` (M,) into the run's failures (a random
    subset when there are more than ``max_points``).
    """
    cached = store.get_arrays(distill_run, "embedding")
    if cached is not None:
        return cached
    dataset, _, vae = load_run_models(registry, store, distill_run)
    failures = failures_of(store, distill_run)
    clusters = assignments_of(store, distill_run)
    rng = np.random.default_rng(seed)
    index = np.arange(len(failures))
    if len(index) > max_points:
        index = np.sort(rng.choice(len(index), max_points, replace=False))
    train_latents = encode_means(vae.module, dataset.train_images).numpy()
    xy = embed_2d(np.concatenate([train_latents, failures.latents[index]]), max_fit=max_fit, seed=seed)
    result = {"train_xy": xy[:len(train_latents)], "train_labels": dataset.train_labels.numpy(),
              "failure_xy": xy[len(train_latents):], "failure_cluster": clusters[index], "failure_index": index}
    store.put_arrays(distill_run, "embedding", result)
    return result


def auto_label(registry, store, distill_run: int, oracle_ref: str, samples: int = 25, rho: float = DEFAULT_RHO,
               seed: int = 0, device: str = "cpu") -> tuple[str, list[dict]]:
    """Label every cluster with an oracle classifier, stored as ``oracle:MODEL`` (never mixed with human labels).

    For demos and tests only: the oracle looks at ``samples`` review samples per
    cluster; its majority class is the label ("none" below a clear majority) and
    the cluster is a failure when the oracle disagrees with the classifier on more
    than ρ of them. Returns the label source (``oracle:MODEL``) and one entry per cluster.
    """
    dataset, classifier, vae = load_run_models(registry, store, distill_run, device)
    # the oracle stands in for people who know the true classes: its default is the clean data set's classifier
    oracle = registry.get_or_train_reference(oracle_ref, "classifier", clean_dataset_name(dataset.name), device=device)
    if oracle.id == classifier.id:
        raise ProbeError("the oracle must be a different classifier from the one being debugged")
    tau = distill_tau(store, distill_run)
    source = oracle_source(oracle.id)
    written = []
    for cluster in store.get_clusters(distill_run):
        shown = review_samples(vae, classifier, cluster, samples, tau, seed)
        verdict = oracle_labels(oracle.module, classifier.module, shown["images"].to(device), rho)
        label = NONE_OF_THE_ABOVE if verdict["label"] is None else dataset.class_names[verdict["label"]]
        store.set_label("oracle", cluster_id=cluster["id"], label=label, is_failure=verdict["is_failure"],
                        source=source)
        written.append({**verdict, "cluster_id": cluster["id"], "label": label, "label_index": verdict["label"]})
    return source, written
