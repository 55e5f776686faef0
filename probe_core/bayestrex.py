"""Bayes-TrEx use cases over the samplers: run targets, stream samples to the workspace, summarise.

:func:`sample` is what the CLI (``probe sample``), the dashboard and scripts call.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from probe_core.data import ImageDataset
from probe_core.diagnostics import POOR_MIXING_NOTE, effective_sample_size, mixing_ok, split_rhat
from probe_core.errors import ProbeError
from probe_core.export import format_table
from probe_core.protocols import StructuredPrior, is_differentiable
from probe_core.sampling import BayesTrExPosterior, ChainResult, Progress, SamplerConfig, run_hmc, run_pyro_nuts, run_rwm
from probe_core.targets import DEFAULT_SIGMA, Target, TargetBatch, parse_targets

SAMPLERS = ("hmc", "nuts", "rwm")


def prior_norm_interval(latent_dim: int, mass: float = 0.98) -> tuple[float, float]:
    """Central interval of ‖z‖ under z ~ N(0, I_D) (a chi distribution)."""
    from scipy.stats import chi

    tail = (1 - mass) / 2
    return float(chi.ppf(tail, latent_dim)), float(chi.ppf(1 - tail, latent_dim))


def test_set_baseline(target: Target, classifier: torch.nn.Module, dataset: ImageDataset) -> dict:
    """How many test images meet the target's hit constraint (paper Sec. 4.10)."""
    with torch.no_grad():
        probs = torch.cat([classifier(dataset.test_images[s:s + 2048]) for s in range(0, len(dataset.test_images), 2048)])
    hits = target.is_hit(probs.cpu())
    return {"test_images": len(probs), "meeting_target": int(hits.sum()),
            "indices": hits.nonzero().squeeze(1)[:50].tolist()}


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


MAX_CHAINS = 1024  # per target, as the pages allow
MAX_ITERATIONS = 100_000


def check_sampler_settings(chains: int = 64, warmup: int = 300, samples: int = 300, sigma: float = DEFAULT_SIGMA,
                           sampler: str = "hmc", keep_every: int = 1, **_ignored) -> None:
    """Raise :class:`ProbeError` with a clear message for settings :func:`sample` cannot run with.

    Called before a run is stored, so bad input leaves the workspace as it was.
    """
    if sampler not in SAMPLERS:
        raise ProbeError(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    if not isinstance(chains, int) or not 1 <= chains <= MAX_CHAINS:
        raise ProbeError(f"chains per target must be a whole number from 1 to {MAX_CHAINS}, got {chains!r}")
    if not isinstance(warmup, int) or not 0 <= warmup <= MAX_ITERATIONS:
        raise ProbeError(f"warm-up iterations must be from 0 to {MAX_ITERATIONS}, got {warmup!r}")
    if not isinstance(samples, int) or not 1 <= samples <= MAX_ITERATIONS:
        raise ProbeError(f"samples per chain must be from 1 to {MAX_ITERATIONS}, got {samples!r}")
    if not isinstance(keep_every, int) or keep_every < 1:
        raise ProbeError(f"keep-every must be a whole number >= 1, got {keep_every!r}")
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ProbeError(f"sigma must be a positive number (the paper uses 0.05), got {sigma!r}")


def sample(classifier, generator, spec: str | list[Target], *, class_names: tuple[str, ...],
           chains: int = 64, warmup: int = 300, samples: int = 300, sigma: float = DEFAULT_SIGMA,
           sampler: str = "hmc", seed: int = 0, init: str = "auto", anneal_sigma_from: float | str | None = "auto",
           dataset: ImageDataset | None = None, store=None, run_id: int | None = None,
           progress: Callable[[Progress], None] | None = None, should_stop: Callable[[], bool] | None = None,
           keep_every: int = 1, target_index_offset: int = 0) -> dict:
    """Sample every target of ``spec`` and return the result (the CLI's ``result.json`` shape).

    Parameters
    ----------
    classifier : nn.Module
        Images -> probabilities (B, K).
    generator : nn.Module
        ``latent_dim``, ``decode``.
    spec : str or list of Target
        Target spec (see :mod:`probe_core.targets`).
    chains : int
        Chains per target (all targets' chains run in one batch; ``nuts`` runs one chain per target).
    store, run_id : optional
        When given, kept samples (z, image, confidences, distance, hit) are streamed to the
        workspace database as they are produced, so a stopped run keeps them.
    progress : callable, optional
        Receives a :class:`Progress` every few iterations.
    should_stop : callable, optional
        Polled at every report; returning True stops the run (what was kept is returned).
    keep_every : int
        Store every n-th kept sample (thinning for the database; summaries use all).
    target_index_offset : int
        Added to the stored ``target_index`` (to keep several calls apart in one run).
    init : str
        Chain starts (see :class:`SamplerConfig`); "auto" uses tempered SMC when the batch has an
        ambiguous or vector target and an optimised start for high-confidence targets (README,
        "How it samples", for the measurements).
    anneal_sigma_from : float, None or "auto"
        Anneal σ from this value during warm-up. "auto" anneals from 0.5 unless the batch has an
        ambiguous target: annealing lifts high-confidence hit rates but sends ambiguous chains into
        the trap where other classes share the mass.
    """
    check_sampler_settings(chains=chains, warmup=warmup, samples=samples, sigma=sigma, sampler=sampler,
                           keep_every=keep_every)
    if not is_differentiable(generator):
        sampler = "rwm"  # a renderer has no gradients: random-walk Metropolis is the valid choice
    targets = parse_targets(spec, class_names) if isinstance(spec, str) else list(spec)
    if targets[0].num_classes != len(class_names):
        raise ProbeError("the targets' class count does not match the classifier")
    hard = any(t.kind != "high" for t in targets)
    if init == "auto":
        init = "smc" if hard and sampler == "hmc" else "optimize"
    if anneal_sigma_from == "auto":
        anneal_sigma_from = None if hard or init == "smc" else 0.5
    started = time.perf_counter()
    if sampler == "nuts":
        per_target = []
        for index, target in enumerate(targets):
            posterior = BayesTrExPosterior(classifier, generator, TargetBatch([target], 1), sigma)
            chain = run_pyro_nuts(posterior, warmup, samples, seed + index)
            per_target.append((target, chain))
            if store is not None and run_id is not None:
                _store_chunk(store, run_id, posterior, 0, chain.positions, chain.probs,
                             index_offset=index + target_index_offset, keep_every=keep_every)
            if should_stop is not None and should_stop():
                break
    else:
        batch = TargetBatch(targets, chains)
        posterior = BayesTrExPosterior(classifier, generator, batch, sigma)
        config = SamplerConfig(num_warmup=warmup, num_samples=samples, seed=seed, init=init,
                               anneal_sigma_from=anneal_sigma_from)
        sink = None
        if store is not None and run_id is not None:
            def sink(first: int, z: torch.Tensor, p: torch.Tensor) -> None:
                _store_chunk(store, run_id, posterior, first, z, p, target_index_offset, keep_every)
        runner = run_hmc if sampler == "hmc" else run_rwm
        result = runner(posterior, config, hook=progress, sink=sink, should_stop=should_stop)
        per_target = []
        for index, target in enumerate(targets):
            chain_ids = (batch.target_index == index).nonzero().squeeze(1)
            per_target.append((target, ChainResult(
                result.positions[chain_ids], result.probs[chain_ids], result.logdensity[chain_ids],
                result.acceptance[chain_ids], result.divergent[chain_ids], result.step_size[chain_ids],
                result.wall_seconds, result.gradient_evaluations, result.cancelled)))
    wall = time.perf_counter() - started
    report_targets = []
    for target, result in per_target:
        summary = summarise_target(target, result.positions, result.probs, result.acceptance, result.divergent,
                                   class_names, structured_prior=isinstance(generator, StructuredPrior))
        entry = {
            "spec": target.spec,
            "description": target.describe(class_names),
            "failed": summary["hits"] == 0,
            "hit_rate": summary["hits"] / summary["kept"] if summary["kept"] else 0.0,
            "summary": summary,
            "samples": _sample_records(target, result, describe=generator.describe if isinstance(generator, StructuredPrior) else None),
        }
        if dataset is not None:
            entry["test_set_baseline"] = test_set_baseline(target, classifier, dataset)
        report_targets.append(entry)
    return {"sampler": sampler, "seed": seed, "sigma": sigma, "chains_per_target": chains,
            "warmup": warmup, "samples_per_chain": samples, "wall_seconds": wall,
            "cancelled": any(r.cancelled for _, r in per_target), "targets": report_targets}


def _sample_records(target: Target, result: ChainResult, limit: int = 2000, describe=None) -> list[dict]:
    """Up to ``limit`` kept samples as JSON records; ``describe(z) -> str`` adds a ``scene`` description."""
    chains, steps, num_classes = result.probs.shape
    records = []
    stride = max(1, (chains * steps) // limit)
    flat = result.probs.reshape(-1, num_classes)
    hits = target.is_hit(flat) if len(flat) else torch.zeros(0, dtype=torch.bool)
    for index in range(0, chains * steps, stride):
        chain, step = divmod(index, steps)
        record = {"chain": chain, "step": step, "confidences": [round(float(p), 5) for p in flat[index]],
                  "hit": bool(hits[index])}
        if describe is not None:
            record["scene"] = describe(result.positions[chain, step])
        records.append(record)
    return records


def _store_chunk(store, run_id: int, posterior: BayesTrExPosterior, first_step: int, z: torch.Tensor,
                 probs: torch.Tensor, index_offset: int = 0, keep_every: int = 1) -> None:
    """Write a chunk of kept samples, (B, n, D) and (B, n, K), with decoded images, hits and distances."""
    batch = posterior.targets
    chains, steps, dim = z.shape
    keep = [s for s in range(steps) if (first_step + s) % keep_every == 0]
    if not keep:
        return
    z, probs = z[:, keep], probs[:, keep]
    with torch.no_grad():
        images = posterior.generator.decode(z.reshape(-1, dim).to(posterior.device)).cpu()
    images = images.reshape(chains, len(keep), *images.shape[1:])
    hits = batch.is_hit(probs)
    distances = batch.distance(probs)
    rows = []
    for chain in range(chains):
        target_index = int(batch.target_index[chain]) + index_offset
        for j, s in enumerate(keep):
            rows.append({"target_index": target_index, "chain": chain, "step": first_step + s,
                         "z": z[chain, j].numpy(), "confidences": probs[chain, j].numpy(),
                         "image": images[chain, j].numpy(), "target_distance": float(distances[chain, j]),
                         "hit": bool(hits[chain, j])})
    store.add_samples(run_id, rows)


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


def table2(result: dict) -> str:
    """The per-target summary as a text table (paper Table 2 plus diagnostics).

    "test set" is how many test images meet the same constraint (paper Sec. 4.10), next to
    the sampler's hit rate.
    """
    header = ["target", "achieved (mean ± sd)", "hit rate", "chains hit", "test set", "ESS", "R-hat", "accept", "div",
              "status"]
    rows = []
    for entry in result["targets"]:
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
    lines = [format_table(rows, header)]
    if any(not mixing_ok(entry["summary"]) for entry in result["targets"]):
        lines.append(POOR_MIXING_NOTE)
    return "\n".join(lines)


def summary_rows(result: dict) -> list[dict]:
    """One plain row per target of a :func:`sample` result (the dashboard's and the report's table)."""
    rows = []
    for entry in result["targets"]:
        s = entry["summary"]
        baseline = entry.get("test_set_baseline")
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
    return rows
