"""Summaries of sampled targets: the paper's Table 2 figures, the test-set baseline, status and what to show.
"""

from __future__ import annotations

import math

import torch

from probe_core.data import ImageDataset
from probe_core.errors import ProbeError
from probe_core.mcmc.diagnostics import (
    POOR_MIXING_NOTE,
    effective_sample_size,
    mixing_ok,
    split_rhat,
)
from probe_core.reporting.export import format_table
from probe_core.sampling.targets import Target


def prior_norm_interval(latent_dim: int, mass: float = 0.98) -> tuple[float, float]:
    """Central interval of ‖z‖ under z ~ N(0, I_D) (a chi distribution)."""
    from scipy.stats import chi

    tail = (1 - mass) / 2
    return float(chi.ppf(tail, latent_dim)), float(chi.ppf(1 - tail, latent_dim))


MISTAKE_CONFIDENCE = 0.85  # the paper's threshold for the misclassification test-set baseline (Sec. 4.10)
TEST_IMAGE_VERDICTS = ("mislabel", "misclassification")


def test_set_baseline(target: Target, classifier: torch.nn.Module, dataset: ImageDataset,
                      listed: int = 200) -> dict:
    """How many test images meet the target's hit constraint (paper Sec. 4.10, the ambiguous baseline).

    For a high-confidence target on class c also the misclassification baseline (Tables 4-5):
    ``confident_mistakes`` counts the test images predicted as c with confidence at least
    :data:`MISTAKE_CONFIDENCE` whose stored label is another class, and lists up to ``listed`` of
    them (``indices``, ``labels``, ``confidences``, most confident first) for people to judge as
    a mislabel or a misclassification.
    """
    with torch.no_grad():
        probs = torch.cat([classifier(dataset.test_images[s:s + 2048]) for s in range(0, len(dataset.test_images), 2048)])
    probs = probs.cpu()
    hits = target.is_hit(probs)
    baseline = {"test_images": len(probs), "meeting_target": int(hits.sum()),
                "indices": hits.nonzero().squeeze(1)[:50].tolist()}
    if target.kind == "high":
        c = target.classes[0]
        confident = (probs.argmax(1) == c) & (probs[:, c] >= MISTAKE_CONFIDENCE) & (dataset.test_labels != c)
        found = confident.nonzero().squeeze(1)
        found = found[probs[found, c].argsort(descending=True)]
        baseline["confident_mistakes"] = {
            "threshold": MISTAKE_CONFIDENCE, "count": len(found), "indices": found[:listed].tolist(),
            "labels": dataset.test_labels[found[:listed]].tolist(),
            "confidences": [round(float(p), 4) for p in probs[found[:listed], c]]}
    return baseline


def label_test_image(store, dataset: ImageDataset, test_index: int, annotator: str, verdict: str,
                     source: str = "human") -> int:
    """Store one person's verdict on a test image at once: ``mislabel`` (its stored label is wrong) or
    ``misclassification`` (the classifier is wrong). Returns the label's row id.

    Raises
    ------
    ProbeError
        For another verdict or an index outside the test set.
    """
    if verdict not in TEST_IMAGE_VERDICTS:
        raise ProbeError(f"a test image's verdict is {' or '.join(TEST_IMAGE_VERDICTS)}, got {verdict!r}")
    if not 0 <= int(test_index) < len(dataset.test_labels):
        raise ProbeError(f"test image {test_index} is not in {dataset.name} (0 to {len(dataset.test_labels) - 1})")
    return store.set_test_image_label(annotator, dataset.name, int(test_index), verdict, source)


def summarise_target(target: Target, positions: torch.Tensor, probs: torch.Tensor, acceptance: torch.Tensor,
                     divergent: torch.Tensor, class_names: tuple[str, ...] | None = None,
                     structured_prior: bool = False) -> dict:
    """The per-target report: Table 2 summary, hit rate, chains that hit, prior check, R-hat/ESS.

    Parameters
    ----------
    positions : (C, S, D), probs : (C, S, K), acceptance, divergent : (C, S)
        The chains of this target.
    structured_prior : bool
        The generator has its own prior (e.g. scenes): the ‖z‖ check against N(0, I) does
        not apply, and every kept sample is in the prior's support by construction.
    """
    chains, steps, dim = positions.shape
    flat = probs.reshape(-1, probs.shape[-1])
    hits = target.is_hit(flat).reshape(chains, steps) if steps else torch.zeros(chains, 0, dtype=torch.bool)
    achieved = {}
    for c in target.reported_classes:
        values = flat[:, c]
        hit_values = flat[hits.reshape(-1), c]
        name = class_names[c] if class_names else str(c)
        achieved[name] = {
            "mean": float(values.mean()) if len(values) else float("nan"),
            "sd": float(values.std()) if len(values) > 1 else float("nan"),
            "hits_mean": float(hit_values.mean()) if len(hit_values) else None,
            "hits_sd": float(hit_values.std()) if len(hit_values) > 1 else None,
        }
    norms = positions.reshape(-1, dim).norm(dim=1)
    hit_norms = norms[hits.reshape(-1)]
    low, high = prior_norm_interval(dim)
    summary = {
        "achieved": achieved,
        "hits": int(hits.sum()),
        "kept": int(chains * steps),
        "chains": chains,
        "chains_with_hits": int(hits.any(1).sum()) if steps else 0,
        "acceptance": float(acceptance.nanmean()) if acceptance.numel() else float("nan"),
        "divergences": int(divergent.sum()),
        "ess_min": effective_sample_size(positions),
        "rhat_max": split_rhat(positions) if chains > 1 else float("nan"),
        "z_norm_hits": None if structured_prior else {
            "mean": float(hit_norms.mean()) if len(hit_norms) else None,
            "share_inside_prior_98": float(((hit_norms >= low) & (hit_norms <= high)).float().mean())
            if len(hit_norms) else None,
            "prior_98_interval": [low, high],
        },
    }
    if structured_prior:
        summary["prior_check"] = ("structured prior: every kept sample lies in its support "
                                  "(proposals outside it are rejected)")
    if not summary["hits"] and steps:
        distances = target.distance(flat)
        best = int(distances.argmin())
        order = flat[best].argsort(descending=True)[:3].tolist()
        summary["nearest_miss"] = {
            "confidences": {class_names[c] if class_names else str(c): float(flat[best, c]) for c in order},
            "distance": float(distances[best]),
        }
    return summary


def best_samples(samples: list[dict], hits_limit: int | None = None, misses_limit: int | None = 16) -> list[dict]:
    """What to show of a target's stored samples: its hits, else the samples closest to the target.

    Both are ordered by distance to the target, closest first, and cut to their limit (None: all).
    """
    hits = [s for s in samples if s["hit"]]
    chosen, limit = (hits, hits_limit) if hits else (samples, misses_limit)
    return sorted(chosen, key=lambda s: s["target_distance"])[:limit]


def best_hit_per_target(samples: list[dict]) -> dict[int, dict]:
    """The closest hit of each target index among stored samples (targets without hits are left out)."""
    best: dict[int, dict] = {}
    for sample in samples:
        current = best.get(sample["target_index"])
        if sample["hit"] and (current is None or sample["target_distance"] < current["target_distance"]):
            best[sample["target_index"]] = sample
    return best


def target_status(entry: dict) -> str:
    """``ok``, ``ok · poor mixing``, ``FAILED`` or ``FAILED · poor mixing`` for one target of a result."""
    status = "FAILED" if entry["failed"] else "ok"
    return status if mixing_ok(entry["summary"]) else f"{status} · poor mixing"


def table2(targets: list[dict]) -> str:
    """The per-target summary of a sampling result (its ``targets``) as a text table (paper Table 2 plus
    diagnostics).

    "test set" is how many test images meet the same constraint (paper Sec. 4.10), next to
    the sampler's hit rate. Where the hits were placed against the training images: "copies", the share of hits
    that are near copies of a training image, and "vs test", their median distance to their nearest training image
    over a real test image's (:mod:`probe_core.data.provenance`; about 1 for new images, near 0 for copies).
    """
    header = ["target", "achieved (mean ± sd)", "hit rate", "chains hit", "test set", "ESS", "R-hat", "accept", "div",
              "status"]
    placed_run = any("provenance" in entry for entry in targets)
    if placed_run:
        header[5:5] = ["copies", "vs test"]
    rows = []
    for entry in targets:
        s = entry["summary"]
        achieved = ", ".join(f"{name}: {v['mean']:.2f} ± {v['sd']:.2f}" for name, v in s["achieved"].items()
                             if not math.isnan(v["mean"]))
        status = target_status(entry)
        if entry["failed"] and "nearest_miss" in s:
            status += " (nearest " + ", ".join(f"{k}={v:.2f}" for k, v in s["nearest_miss"]["confidences"].items()) + ")"
        baseline = entry.get("test_set_baseline")
        test_set = f"{baseline['meeting_target']}/{baseline['test_images']}" if baseline else "-"
        rows.append([entry["spec"], achieved if len(achieved) < 60 else achieved[:57] + "...",
                     f"{entry['hit_rate'] * 100:.0f}%", f"{s['chains_with_hits']}/{s['chains']}", test_set,
                     f"{s['ess_min']:.0f}", f"{s['rhat_max']:.2f}", f"{s['acceptance']:.2f}", str(s["divergences"]),
                     status])
        if placed_run:
            rows[-1][5:5] = _provenance_cells(entry.get("provenance"))
    lines = [format_table(rows, header)]
    for entry in targets:
        mistakes = (entry.get("test_set_baseline") or {}).get("confident_mistakes")
        if mistakes and mistakes["count"]:
            lines.append(f"{entry['spec']}: {mistakes['count']} test images are called this class with at least "
                         f"{mistakes['threshold']:.0%} confidence but labelled otherwise (the misclassification "
                         f"test-set baseline): indices {', '.join(map(str, mistakes['indices'][:10]))}"
                         + (" ..." if mistakes["count"] > 10 else ""))
    if any(not mixing_ok(entry["summary"]) for entry in targets):
        lines.append(POOR_MIXING_NOTE)
    return "\n".join(lines)


def _provenance_cells(placed: dict | None) -> list[str]:
    """The near-copy share and the median distance ratio of a target's hits, as table cells."""
    if not placed or not placed.get("measured"):
        return ["-", "-"]
    return [f"{placed['near_copy_share']:.0%}", f"{placed['median_ratio']:.2f}"]


def summary_rows(targets: list[dict]) -> list[dict]:
    """One plain row per target of a sampling result (its ``targets``; the dashboard's and the report's table)."""
    rows = []
    judged_run = any("judge_agreement" in entry for entry in targets)
    for entry in targets:
        s = entry["summary"]
        baseline = entry.get("test_set_baseline")
        judged = entry.get("judge_agreement")
        rows.append({
            "target": entry["description"],
            "achieved (mean ± sd)": ", ".join(f"{name}: {v['mean']:.2f} ± {v['sd']:.2f}"
                                              for name, v in s["achieved"].items() if not math.isnan(v["mean"])),
            "hit rate": entry["hit_rate"],
            "chains hit": f"{s['chains_with_hits']}/{s['chains']}",
            "test set": f"{baseline['meeting_target']}/{baseline['test_images']}" if baseline else "-",
            "ESS": s["ess_min"], "R-hat": s["rhat_max"], "acceptance": s["acceptance"],
            "divergences": s["divergences"],
            "status": target_status(entry),
        })
        if judged_run:  # hits an independent classifier puts in the target's classes
            rows[-1]["judge agrees"] = f"{judged['agreed']}/{judged['judged']}" if judged else "-"
        if "provenance" in entry:  # is a hit new, or a copy of a training image?
            copies, ratio = _provenance_cells(entry["provenance"])
            rows[-1]["near copies"], rows[-1]["distance vs test"] = copies, ratio
            rows[-1]["distinct training images"] = entry["provenance"].get("distinct_nearest", 0)
    return rows
