"""Run Bayes-TrEx targets: check the settings, sample every target in one batch, stream to the store.

:func:`sample` is what the CLI (``probe sample``), the dashboard's jobs and scripts call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from probe_core.bayestrex.request import SAMPLER_SETTING_NAMES, SamplerSettings
from probe_core.bayestrex.summary import summarise_target, test_set_baseline
from probe_core.data import ImageDataset
from probe_core.errors import CancelledError, ProbeError
from probe_core.mcmc.driver import ChainResult
from probe_core.models.checks import GENERATOR_THRESHOLDS, judge_agreement
from probe_core.progress import Reporter
from probe_core.runs.scaleout import (
    LocalShards,
    ShardTask,
    parse_executor,
    shard_count,
    shard_seed,
    split_evenly,
)
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc, run_pyro_nuts, run_rwm
from probe_core.sampling.protocols import ClassConditionalPrior, StructuredPrior, is_differentiable
from probe_core.sampling.targets import Target, TargetBatch, TargetSpec


def auto_init(generator, hard: bool, sampler: str) -> str:
    """The chain starts ``init="auto"`` stands for.

    For a generator whose prior has a part per class (a density autoencoder's, :class:`ClassConditionalPrior`),
    draws from the parts of each target's classes (a ``high:C`` chain starts near codes of C, an ambiguous one
    near codes of either class); else tempered SMC when the batch has an ambiguous or vector target (``hard``)
    and the sampler is HMC; else an optimised start (docs/bayes-trex.md, "How it samples"). Class starts depart
    from the paper, whose chains start from the prior; under the kernel density they pinned each chain to the
    training code it started on (its hits were blurred copies of one training image, docs/real-size.md), so the
    real-size default (a flow prior over the codes, N(0, I) noise) has none: its chains start as a VAE's.
    """
    if isinstance(generator, ClassConditionalPrior):
        return "classes"
    return "smc" if hard and sampler == "hmc" else "optimize"


def sample(classifier, generator, spec: TargetSpec | str | list[Target], *, class_names: tuple[str, ...],
           settings: SamplerSettings | None = None, dataset: ImageDataset | None = None, store=None,
           run_id: int | None = None, reporter: Reporter | None = None, target_index_offset: int = 0,
           executor=None, shards: int | None = 1, judge=None, provenance=None, **keywords) -> dict:
    """Sample every target of ``spec`` and return the result (the CLI's ``result.json`` shape).

    The sampler's settings are a :class:`~probe_core.bayestrex.request.SamplerSettings`, checked when it was made
    (a :class:`~probe_core.bayestrex.request.SampleRequest` carries one) and trusted here; or, instead, its fields
    as keywords (``chains=16, warmup=300``), made into one here, so a bad value is one clear error before any
    work.

    Parameters
    ----------
    classifier : nn.Module
        Images -> probabilities (B, K).
    generator : nn.Module
        ``latent_dim``, ``decode``.
    spec : TargetSpec, str or sequence of Target
        The targets (:mod:`probe_core.sampling.targets`); text is parsed in ``class_names``.
    settings : SamplerSettings, optional
        Chains per target (all targets' chains run in one batch; ``nuts`` runs one chain per target), warm-up,
        samples, σ, the sampler, the seed, chain starts ("auto": :func:`auto_init`), σ annealing ("auto" anneals
        from 0.5 unless the batch has an ambiguous target, whose chains annealing sends into the trap where other
        classes share the mass), the storage stride and independence jumps (see its fields).
    store, run_id : optional
        Kept samples (z, image, confidences, distance, hit) are streamed there as they are made (a stopped run
        keeps them).
    reporter : Reporter, optional
        Told the progress every few iterations, with the chains (a :class:`~probe_core.mcmc.driver.ChainsSnapshot`) as
        ``details["chains"]``; from shards, their progress (:func:`~probe_core.runs.scaleout.report_shards`)
        instead. A stop (its ``report`` raising, or ``stop_requested()``) ends the run; what was kept is returned.
    target_index_offset : int
        Added to the stored ``target_index`` (to keep several calls apart in one run).
    executor : Executor, optional
        Where the target shards run (:mod:`probe_core.runs.scaleout`; default: here, in one batch).
    shards : int or None
        None: 1 here, one per worker on Ray. Split the targets into this many shards, each sampled with its own seed
        (:func:`~probe_core.runs.scaleout.shard_seed`); results are equal on every executor.
    judge : nn.Module, optional
        A classifier that was not probed (images -> probabilities (B, K), the same classes): each high or
        ambiguous target's hits are decoded and judged, and its entry gets ``judge_agreement``
        (:func:`judged_hits`), flagged where the judge puts fewer than half of them in the target's classes.
    provenance : ProvenanceMeter, optional
        Each target's hits are placed against the data set's training images
        (:class:`~probe_core.data.provenance.ProvenanceMeter`): its entry gets ``provenance``, the figures of
        :func:`~probe_core.data.provenance.summarise_provenance` (``copying`` where they look copied).
    **keywords
        The fields of :class:`~probe_core.bayestrex.request.SamplerSettings`, where ``settings`` is not given.
    """
    settings = _settings_of(settings, keywords)
    sampler, init, anneal_sigma_from = settings.sampler, settings.init, settings.anneal_sigma_from
    chains, warmup, samples, sigma = settings.chains, settings.warmup, settings.samples, settings.sigma
    seed = settings.seed
    if not is_differentiable(generator):
        sampler = "rwm"  # a renderer has no gradients: random-walk Metropolis is the valid choice
    targets = _targets_of(spec, class_names)
    hard = any(t.needs_tempered_start for t in targets)
    if init == "auto":
        init = auto_init(generator, hard, sampler)
    if anneal_sigma_from == "auto":
        anneal_sigma_from = None if hard or init == "smc" else 0.5
    executor, shards = _shard_plan(executor, shards)
    chosen = settings.derived(sampler=sampler, init=init, anneal_sigma_from=anneal_sigma_from)
    if sampler != "nuts" and (shards > 1 or (executor is not None and executor.distributed)):
        return _sample_in_shards(classifier, generator, targets, class_names=class_names, settings=chosen,
                                 dataset=dataset, store=store, run_id=run_id, reporter=reporter,
                                 target_index_offset=target_index_offset,
                                 executor=executor, shards=shards, judge=judge, provenance=provenance)
    started = time.perf_counter()
    run_here = _nuts_per_target if sampler == "nuts" else _batched_per_target
    per_target = run_here(classifier, generator, targets, chosen, store if run_id is not None else None, run_id,
                          reporter, target_index_offset)
    wall = time.perf_counter() - started
    report_targets = [_target_entry(target, result, classifier, generator, class_names, dataset, judge, provenance)
                      for target, result in per_target]
    return {"sampler": sampler, "seed": seed, "sigma": sigma, "chains_per_target": chains,
            "warmup": warmup, "samples_per_chain": samples, "wall_seconds": wall,
            "cancelled": any(r.cancelled for _, r in per_target), "targets": report_targets}


def _shard_plan(executor, shards: int | None):
    """The executor (parsed where named) and the shard count (None: :func:`~probe_core.runs.scaleout.shard_count`),
    refused unless a whole number >= 1."""
    if isinstance(executor, str) or shards is None:
        executor = parse_executor(executor) if isinstance(executor, str) else executor
        shards = shard_count(executor, shards)
    if not isinstance(shards, int) or shards < 1:
        raise ProbeError(f"shards must be a whole number >= 1, got {shards!r}")
    return executor, shards


def _targets_of(spec: TargetSpec | str | list[Target], class_names: tuple[str, ...]) -> list[Target]:
    """The targets of a spec (text parsed in ``class_names``), refused when there are none or their class count is
    not the classifier's."""
    if isinstance(spec, str):
        spec = TargetSpec.parse(spec, class_names)
    targets = list(spec.targets if isinstance(spec, TargetSpec) else spec)
    if not targets:
        raise ProbeError("no targets given")
    if targets[0].num_classes != len(class_names):
        raise ProbeError("the targets' class count does not match the classifier")
    return targets


def _nuts_per_target(classifier, generator, targets: list[Target], settings: SamplerSettings, store, run_id,
                     reporter: Reporter | None, target_index_offset: int) -> list[tuple[Target, ChainResult]]:
    """Pyro's NUTS (the reference sampler), one chain per target, each stored as it ends (``store`` given); a stop
    keeps the targets sampled so far."""
    per_target = []
    for index, target in enumerate(targets):
        posterior = BayesTrExPosterior(classifier, generator, TargetBatch([target], 1), settings.sigma)
        chain = run_pyro_nuts(posterior, settings.warmup, settings.samples, settings.seed + index)
        per_target.append((target, chain))
        if store is not None:
            _store_chunk(store, run_id, posterior, 0, chain.positions, chain.probs,
                         index_offset=index + target_index_offset, keep_every=settings.keep_every)
        try:
            if reporter is not None:
                reporter.report((index + 1) / len(targets), f"NUTS: target {index + 1} of {len(targets)}")
        except CancelledError:  # asked to stop: the targets sampled so far
            break
    return per_target


def _batched_per_target(classifier, generator, targets: list[Target], settings: SamplerSettings, store, run_id,
                        reporter: Reporter | None, target_index_offset: int) -> list[tuple[Target, ChainResult]]:
    """Every target's chains in one batch (HMC or random-walk Metropolis, ``settings.sampler``, with its chosen
    start and annealing), streamed to ``store`` as they are kept; then each target's share of the chains."""
    batch = TargetBatch(targets, settings.chains)
    posterior = BayesTrExPosterior(classifier, generator, batch, settings.sigma)
    config = SamplerConfig(num_warmup=settings.warmup, num_samples=settings.samples, seed=settings.seed,
                           init=settings.init, anneal_sigma_from=settings.anneal_sigma_from,
                           independence_moves=settings.independence_moves)
    sink = None
    if store is not None:
        def sink(first: int, z: torch.Tensor, p: torch.Tensor) -> None:
            _store_chunk(store, run_id, posterior, first, z, p, target_index_offset, settings.keep_every)
    runner = run_hmc if settings.sampler == "hmc" else run_rwm
    result = runner(posterior, config, reporter=reporter, sink=sink)
    per_target = []
    for index, target in enumerate(targets):
        chain_ids = (batch.target_index == index).nonzero().squeeze(1)
        per_target.append((target, ChainResult(
            result.positions[chain_ids], result.probs[chain_ids], result.logdensity[chain_ids],
            result.acceptance[chain_ids], result.divergent[chain_ids], result.step_size[chain_ids],
            result.wall_seconds, result.gradient_evaluations, result.cancelled,
            independence_acceptance=None if result.independence_acceptance is None
            else result.independence_acceptance[chain_ids])))
    return per_target


def _target_entry(target: Target, result: ChainResult, classifier, generator, class_names: tuple[str, ...],
                  dataset: ImageDataset | None, judge, provenance) -> dict:
    """One target's entry of the result: its summary and sample records, and where asked its test-set baseline,
    the judge's agreement and the hits' provenance (hits decoded once for both)."""
    structured = isinstance(generator, StructuredPrior)
    summary = summarise_target(target, result.positions, result.probs, result.acceptance, result.divergent,
                               class_names, structured_prior=structured)
    entry = {
        "spec": target.spec,
        "classes": list(target.classes),
        "description": target.describe(class_names),
        "failed": summary["hits"] == 0,
        "hit_rate": summary["hits"] / summary["kept"] if summary["kept"] else 0.0,
        "summary": summary,
        "samples": _sample_records(target, result, describe=generator.describe if structured else None),
    }
    if result.independence_acceptance is not None:
        entry["independence_acceptance"] = round(float(result.independence_acceptance.mean()), 4)
    if dataset is not None:
        entry["test_set_baseline"] = test_set_baseline(target, classifier, dataset)
    if (judge is not None and target.judged_classes) or provenance is not None:
        decoded = decoded_hits(generator, target, result)
        if judge is not None and target.judged_classes:
            entry["judge_agreement"] = judged_hits(judge, generator, target, result, decoded=decoded)
        if provenance is not None:
            entry["provenance"] = provenance.measure(decoded.images, decoded.probs, decoded.chains)
    return entry


# The most hits of one target decoded for the judge (evenly spaced over the chains' kept samples).
JUDGED_HITS = 2000


@dataclass(frozen=True)
class DecodedHits:
    """A target's hits, at most :data:`JUDGED_HITS` evenly spaced over its chains' kept samples, decoded.

    ``images`` (H, C, H', W'), ``probs`` (H, K) the probed classifier's, ``chains`` (H,) the chain of each.
    """

    images: torch.Tensor
    probs: torch.Tensor
    chains: torch.Tensor


@torch.no_grad()
def decoded_hits(generator, target: Target, result: ChainResult, batch_size: int = 256) -> DecodedHits:
    """:class:`DecodedHits` of one target's chains (positions (B, S, D), confidences (B, S, K))."""
    chains, steps, classes = result.probs.shape
    flat = result.probs.reshape(-1, classes)
    hits = target.is_hit(flat).nonzero().squeeze(1) if len(flat) else torch.zeros(0, dtype=torch.long)
    hits = hits[::max(1, -(-len(hits) // JUDGED_HITS))]
    positions = result.positions.reshape(len(flat), -1)[hits]
    device = next(iter(generator.parameters()), torch.empty(0)).device
    images = (torch.cat([generator.decode(positions[s:s + batch_size].to(device)).cpu()
                         for s in range(0, len(positions), batch_size)]) if len(positions) else torch.zeros(0))
    return DecodedHits(images, flat[hits], hits // max(steps, 1))


@torch.no_grad()
def judged_hits(judge, generator, target: Target, result: ChainResult, batch_size: int = 256,
                decoded: DecodedHits | None = None) -> dict:
    """How many of a target's hits a classifier that was not probed puts in the target's classes.

    Bayes-TrEx's hits are meant to be in-distribution images the probed classifier sees as the target; a hit
    the judge puts elsewhere fools the probed classifier without looking like the class (on the 64x64 sign-like
    stand-in, the hits of classes the generator draws poorly: docs/real-size.md).

    Parameters
    ----------
    judge : nn.Module
        Images (B, C, H, W) -> probabilities (B, K).
    generator : nn.Module
        ``decode``: (B, D) -> (B, C, H, W).
    target : Target
        With :attr:`~probe_core.sampling.targets.Target.judged_classes`.
    result : ChainResult
        The target's chains: positions (B, S, D) and confidences (B, S, K).
    decoded : DecodedHits, optional
        Its hits, already decoded (:func:`decoded_hits`).

    Returns
    -------
    dict
        ``judged`` (hits decoded, at most :data:`JUDGED_HITS`), ``agreed`` (those whose judged top class is one
        of the target's), ``share`` (None without hits) and ``flagged`` (``share`` below
        :data:`~probe_core.models.checks.GENERATOR_THRESHOLDS` ``judge_agreement``).
    """
    decoded = decoded or decoded_hits(generator, target, result, batch_size)
    images = decoded.images if len(decoded.images) else None
    agreed, judged = judge_agreement(judge, images, target.judged_classes, batch_size)
    share = round(agreed / judged, 3) if judged else None
    limit = GENERATOR_THRESHOLDS["judge_agreement"]
    return {"judged": judged, "agreed": agreed, "share": share, "flagged": share is not None and share < limit}


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


class _CollectedSamples:
    """Stands in for the store inside a shard: keeps the rows ``_store_chunk`` writes, to be stored by the run."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add_samples(self, run_id: int, rows: list[dict]) -> None:
        self.rows.extend(rows)


def _settings_of(settings: SamplerSettings | None, keywords: dict) -> SamplerSettings:
    """The run's settings: ``settings`` as given (checked when it was made), or made from ``keywords`` (checked)."""
    unknown = set(keywords) - set(SAMPLER_SETTING_NAMES)
    if unknown:
        raise ProbeError(f"unknown sampler setting(s) {', '.join(sorted(unknown))}; the settings are "
                         f"{', '.join(SAMPLER_SETTING_NAMES)}")
    if settings is None:
        return SamplerSettings(**keywords)
    if keywords:
        raise ProbeError("give the sampler's settings as a SamplerSettings or as keywords, not both")
    return settings


def sample_shard(models: dict, reporter: Reporter, *, targets: list[Target], **options) -> dict:
    """One shard of a sharded :func:`sample` (a :mod:`probe_core.runs.scaleout` shard function).

    ``models``: the ``classifier``, the ``generator`` and, where the run has one, the ``judge``. Returns
    ``{"result": ..., "rows": [...]}``: the shard's result and its kept samples, for the run to store. A stopped
    run ends the shard's chains at the sampler's next check, with the samples they have.
    """
    kept = _CollectedSamples()
    result = sample(models["classifier"], models["generator"], targets, store=kept, run_id=0, reporter=reporter,
                    judge=models.get("judge"), **options)
    return {"result": result, "rows": kept.rows}


def _stored_hits_provenance(provenance, rows: list[dict]) -> dict:
    """A target's provenance from the hits its shard stored (at most :data:`JUDGED_HITS`, evenly spaced)."""
    rows = rows[::max(1, -(-len(rows) // JUDGED_HITS))]
    if not rows:
        return provenance.measure(torch.zeros(0), torch.zeros(0, 1))
    images = torch.from_numpy(np.stack([row["image"] for row in rows]))
    probs = torch.from_numpy(np.stack([row["confidences"] for row in rows]))
    return provenance.measure(images, probs, np.array([row["chain"] for row in rows]))


def _sample_in_shards(classifier, generator, targets: list[Target], *, class_names, settings: SamplerSettings,
                      dataset, store, run_id, reporter, target_index_offset: int, executor,
                      shards: int, judge=None, provenance=None) -> dict:
    """:func:`sample` with the targets split into shards run by ``executor``; kept samples stored as shards end."""
    executor = executor or LocalShards()
    started = time.perf_counter()
    pieces = split_evenly(len(targets), shards)
    models = {"classifier": classifier, "generator": generator, **({} if judge is None else {"judge": judge})}
    tasks = [ShardTask(sample_shard,
                       {"targets": targets[piece.start:piece.stop], "class_names": class_names,
                        "settings": settings.derived(seed=shard_seed(settings.seed, index)),
                        "target_index_offset": target_index_offset + piece.start},
                       models, f"targets {piece.start + 1}-{piece.stop} of {len(targets)}")
               for index, piece in enumerate(pieces)]
    results: dict[int, dict] = {}

    hit_rows: dict[int, list[dict]] = {}

    def on_result(index: int, value: dict) -> None:
        if store is not None and run_id is not None and value["rows"]:
            store.add_samples(run_id, value["rows"])
        if provenance is not None:
            for row in value["rows"]:
                if row["hit"]:
                    hit_rows.setdefault(row["target_index"], []).append(row)
        results[index] = value["result"]

    outcome = executor.map(tasks, on_result, reporter)
    report_targets = []
    for index in sorted(results):
        for offset, entry in enumerate(results[index]["targets"]):
            entry["target_index"] = target_index_offset + pieces[index].start + offset  # that of its stored samples
            if dataset is not None:
                entry["test_set_baseline"] = test_set_baseline(targets[pieces[index].start + offset], classifier,
                                                               dataset)
            if provenance is not None:
                entry["provenance"] = _stored_hits_provenance(provenance, hit_rows.get(entry["target_index"], []))
            report_targets.append(entry)
    first = next(iter(results.values()), {})
    result = {"sampler": first.get("sampler", settings.sampler), "seed": settings.seed,
              "sigma": settings.sigma, "chains_per_target": settings.chains,
              "warmup": settings.warmup, "samples_per_chain": settings.samples,
              "wall_seconds": time.perf_counter() - started,
              "cancelled": outcome.cancelled or any(r["cancelled"] for r in results.values()),
              "targets": report_targets, "executor": executor.name, "shards": len(tasks)}
    missing = outcome.not_done(tasks)
    if missing:
        result["not_done"] = missing
    return result
