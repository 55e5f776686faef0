"""Bayes-TrEx sampling as a run kind: a :class:`~probe_core.bayestrex.request.SampleRequest` runs as a job that streams
samples and the live trace the Probe page draws. (The comparison's run kind is in
:mod:`probe_core.bayestrex.compare`.)
"""

from __future__ import annotations

from probe_core.bayestrex.recipes import prepare_sample, probe_target
from probe_core.bayestrex.request import SampleRequest
from probe_core.bayestrex.results import SamplingResult
from probe_core.mcmc.diagnostics import effective_sample_size, split_rhat
from probe_core.progress import rewritten
from probe_core.runs.lifecycle import job_of, run_kind, training_announcer

run_kind(SamplingResult)(SampleRequest)


class LiveTrace:
    """What the dashboard draws while a run goes: per-chain traces, diagnostics and current images.

    Fed the sampler's :class:`~probe_core.mcmc.driver.ChainsSnapshot` reports; :meth:`details` is
    the JSON written to the run's ``details`` (bounded: at most ``max_chains`` chains and
    ``max_points`` points per trace).

    Parameters
    ----------
    targets : list of Target
        The run's targets, in batch order.
    chains_per_target : int
    """

    def __init__(self, targets: list, chains_per_target: int, max_chains: int = 16, max_points: int = 300) -> None:
        import torch

        self.targets = targets
        self.target_of_chain = torch.arange(len(targets)).repeat_interleave(chains_per_target)
        self.shown = torch.linspace(0, len(self.target_of_chain) - 1, min(max_chains, len(self.target_of_chain))).long()
        self.max_points = max_points
        self.iterations: list[int] = []
        self.logdensity: list[list[float]] = []
        self.confidence: list[list[float]] = []
        self.acceptance: list[float] = []
        self.step_size: list[float] = []
        self.sampling_positions: list = []
        self.latest: dict = {}

    def update(self, progress) -> None:
        """Record one report (tensors of shape (B, ...) over all chains)."""
        import torch

        chains = self.shown
        watched = torch.tensor([self.targets[int(self.target_of_chain[c])].reported_classes[0] for c in chains])
        self.iterations.append(int(progress.iteration))
        self.logdensity.append([round(float(v), 3) for v in progress.logdensity[chains]])
        self.confidence.append([round(float(v), 4) for v in progress.probs[chains, watched]])
        self.acceptance.append(round(float(progress.acceptance.mean()), 4))
        self.step_size.append(float(progress.step_size.median()))
        if progress.stage == "sampling":
            self.sampling_positions.append(progress.position.detach().cpu().clone())
        for series in (self.iterations, self.logdensity, self.confidence, self.acceptance, self.step_size):
            del series[:-self.max_points]
        diagnostics = {}
        if len(self.sampling_positions) >= 4:
            positions = torch.stack(self.sampling_positions[-200:], dim=1)  # (B, S, D)
            diagnostics = {"rhat": split_rhat(positions), "ess": effective_sample_size(positions)}
        images = progress.images
        self.latest = {
            "stage": progress.stage, "iteration": int(progress.iteration), "total": int(progress.total),
            "sigma": float(progress.sigma), "divergences": int(progress.divergences.sum()), **diagnostics,
            "images": [] if images is None else images.cpu().numpy().round(3).tolist(),
            "image_confidences": [] if images is None else progress.probs[:len(images)].numpy().round(4).tolist(),
        }

    def details(self) -> dict:
        return {"trace": {"iteration": self.iterations, "logdensity": self.logdensity, "confidence": self.confidence,
                          "acceptance": self.acceptance, "step_size": self.step_size,
                          "chains": self.shown.tolist()},
                **self.latest}


@job_of(SampleRequest)
def sampling_job(registry, request: SampleRequest, device: str = "cpu"):
    """:func:`probe_target` of a :class:`~probe_core.bayestrex.request.SampleRequest` as a background job that streams
    samples and a :class:`LiveTrace` to its run.

    Returns a :class:`~probe_core.bayestrex.results.SamplingResult`; the run stores it without the
    per-sample records (they are in the store), so it stays small enough for the runs table.
    """

    def run(context) -> SamplingResult:
        context.report(0.0, "loading models and starting chains", force=True)
        prepared = prepare_sample(registry.announcing(training_announcer(context)), request, device,
                                  suggest_generator=False)
        chains = 1 if request.sampler == "nuts" else request.chains
        trace = LiveTrace(prepared.request.targets, chains)

        def with_live_trace(fraction, message, details, force):
            if details and "chains" in details:
                trace.update(details["chains"])
                return fraction, message, trace.details(), force
            if details and "shards_done" in details:  # a sharded run: one bar over all shards, no per-chain trace
                return (fraction, f"sampling: {details['shards_done']}/{details['shards']} shards done",
                        {"shards_done": details["shards_done"], "shards": details["shards"]}, force)
            return fraction, message, None, force

        result = probe_target(prepared, store=context.store, run_id=context.run_id,
                              reporter=rewritten(context, with_live_trace))
        context.report_last("stopped early; summary of what was kept" if result.cancelled else "done",
                            trace.details())
        return result

    return run
