"""A prior over an autoencoder's codes learned as a normalizing flow, so that Bayes-TrEx samples its noise.

The kernel density (:class:`~probe_core.models.density.KernelCodeDensity`) pins each chain to the training code it
starts on: its hits are denoised training images. Here a RealNVP flow (Dinh et al., ICLR 2017) maps noise
ε ~ N(0, I) to whitened codes w = T(ε), trained by maximum likelihood on the training codes and stopped where the
held-out codes' likelihood is best. :class:`NoiseFlowGenerator` decodes ``decode(m + L T(ε))``: a generator whose
prior is the papers' N(0, I), so HMC runs on the noise (no structured prior), chains move smoothly between the
regions of the codes, and Defuse perturbs a training image's noise T⁻¹(w) rather than its code.

Measured beside the kernel density, the manifold kernels and the class Gaussians by ``benchmarks/generators.py``
(docs/real-size.md, "A prior that generates").
"""

from __future__ import annotations

import math

import torch
from torch import nn

from probe_core.errors import ProbeError
from probe_core.progress import Reporter

# The flow's shape and training (on about 8,000 codes of 512 at 32x32 it overfits after a few hundred steps: the
# held-out codes' likelihood is best near step 250, so training stops where it is).
FLOW_LAYERS = 6
FLOW_HIDDEN = 512
FLOW_MAX_STEPS = 600
FLOW_BATCH = 256
FLOW_LEARNING_RATE = 1e-3
FLOW_EVALUATE_EVERY = 50
# Noise added to the whitened training codes in training (whitened units): the flow learns a density, not points.
FLOW_DEQUANTISATION = 0.05


class AffineCoupling(nn.Module):
    """One RealNVP coupling: the dimensions outside ``mask`` are scaled and shifted by a network of those inside."""

    def __init__(self, dim: int, hidden: int, mask: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mask", mask)
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, 2 * dim))
        nn.init.zeros_(self.net[-1].weight)  # starts as the identity
        nn.init.zeros_(self.net[-1].bias)

    def _scale_shift(self, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale, shift = self.net(kept).chunk(2, -1)
        free = 1 - self.mask
        return torch.tanh(scale) * free, shift * free

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, D) -> (B, D) and log |det ∂y/∂x| (B,)."""
        scale, shift = self._scale_shift(x * self.mask)
        return x * torch.exp(scale) + shift, scale.sum(-1)

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, D) -> (B, D) and log |det ∂x/∂y| (B,)."""
        kept = y * self.mask
        scale, shift = self._scale_shift(kept)
        return kept + (1 - self.mask) * (y - shift) * torch.exp(-scale), -scale.sum(-1)


class CodeFlow(nn.Module):
    """A RealNVP flow T over D dimensions: noise ε (B, D) to whitened codes w = T(ε) (B, D), and back.

    Parameters
    ----------
    dim : int
        D.
    layers, hidden : int
        Couplings, each with a random half of the dimensions kept (seeded), and their networks' width.
    seed : int
        Chooses the halves.
    """

    def __init__(self, dim: int, layers: int = FLOW_LAYERS, hidden: int = FLOW_HIDDEN, seed: int = 0) -> None:
        super().__init__()
        if dim < 2 or layers < 1 or hidden < 1:
            raise ProbeError(f"a code flow needs at least 2 dimensions, 1 layer and 1 hidden unit, got dim={dim}, "
                             f"layers={layers}, hidden={hidden}")
        generator = torch.Generator().manual_seed(seed)
        masks = []
        for _ in range(layers):
            mask = torch.zeros(dim)
            mask[torch.randperm(dim, generator=generator)[:dim // 2]] = 1.0
            masks.append(mask)
        self.dim = dim
        self.couplings = nn.ModuleList([AffineCoupling(dim, hidden, mask) for mask in masks])

    def forward(self, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """T(ε) and log |det ∂T/∂ε|: (B, D) -> (B, D), (B,)."""
        x, log_det = noise, torch.zeros(len(noise), device=noise.device, dtype=noise.dtype)
        for coupling in self.couplings:
            x, part = coupling(x)
            log_det = log_det + part
        return x, log_det

    def inverse(self, whitened: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """T⁻¹(w) and log |det ∂T⁻¹/∂w|: (B, D) -> (B, D), (B,)."""
        x, log_det = whitened, torch.zeros(len(whitened), device=whitened.device, dtype=whitened.dtype)
        for coupling in reversed(self.couplings):
            x, part = coupling.inverse(x)
            log_det = log_det + part
        return x, log_det

    def log_prob(self, whitened: torch.Tensor) -> torch.Tensor:
        """log p(w) = log N(T⁻¹(w); 0, I) + log |det ∂T⁻¹/∂w|: (B, D) -> (B,)."""
        noise, log_det = self.inverse(whitened)
        return -0.5 * noise.pow(2).sum(-1) - 0.5 * self.dim * math.log(2 * math.pi) + log_det


def fit_code_flow(train: torch.Tensor, held_out: torch.Tensor, *, layers: int = FLOW_LAYERS,
                  hidden: int = FLOW_HIDDEN, max_steps: int = FLOW_MAX_STEPS, seed: int = 0,
                  reporter: Reporter | None = None) -> tuple[CodeFlow, dict]:
    """Train a :class:`CodeFlow` on whitened codes by maximum likelihood, kept where held-out codes score best.

    Parameters
    ----------
    train, held_out : torch.Tensor
        Whitened codes (N, D) and (M, D) (the training images' and held-out images').
    layers, hidden, max_steps, seed
        The flow's shape, the most steps of Adam and the seed of its halves and batches.
    reporter : Reporter, optional
        Told the fraction of steps done.

    Returns
    -------
    flow : CodeFlow
        In eval mode, its parameters frozen.
    figures : dict
        ``steps`` (the step kept), ``held_out_nll`` and ``train_nll`` (per dimension, nats) and ``gaussian_nll`` (the
        same for N(0, I), for scale).
    """
    if train.ndim != 2 or held_out.ndim != 2 or train.shape[1] != held_out.shape[1] or len(held_out) == 0:
        raise ProbeError(f"a code flow is fitted on whitened codes (N, D) with held-out codes (M, D), got "
                         f"{tuple(train.shape)} and {tuple(held_out.shape)}")
    dim = train.shape[1]
    torch.manual_seed(seed)
    flow = CodeFlow(dim, layers, hidden, seed)
    optimiser = torch.optim.Adam(flow.parameters(), lr=FLOW_LEARNING_RATE, weight_decay=1e-5)
    batches = torch.Generator().manual_seed(seed)

    def nll(codes: torch.Tensor) -> float:
        with torch.no_grad():
            return float(-flow.log_prob(codes).mean()) / dim

    best = (nll(held_out), 0, {name: value.clone() for name, value in flow.state_dict().items()})
    for step in range(1, max_steps + 1):
        rows = torch.randint(0, len(train), (min(FLOW_BATCH, len(train)),), generator=batches)
        batch = train[rows] + FLOW_DEQUANTISATION * torch.randn(len(rows), dim, generator=batches)
        loss = -flow.log_prob(batch).mean() / dim
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % FLOW_EVALUATE_EVERY == 0 or step == max_steps:
            score = nll(held_out)
            if score < best[0]:
                best = (score, step, {name: value.clone() for name, value in flow.state_dict().items()})
            if reporter is not None:
                # the message alone: the flow fits after its autoencoder, whose bar is full
                reporter.report(None, f"code flow: step {step}/{max_steps}, held-out {score:.3f} nats/dim")
    flow.load_state_dict(best[2])
    flow.eval().requires_grad_(False)
    return flow, {"steps": best[1], "held_out_nll": round(best[0], 4), "train_nll": round(nll(train[:2000]), 4),
                  "gaussian_nll": round(0.5 * math.log(2 * math.pi * math.e), 4)}


class NoiseFlowGenerator(nn.Module):
    """An autoencoder seen through a flow prior over its codes: latents are the flow's noise ε ~ N(0, I).

    ``decode(ε)`` decodes m + L T(ε) with the autoencoder (m and L the training codes' mean and Cholesky factor);
    ``encode(x)`` gives T⁻¹(L⁻¹(code − m)), so Defuse perturbs an image's noise. Its prior is N(0, I): Bayes-TrEx's
    HMC runs on the noise as on a VAE's latents. The flow and m, L travel in the module's ``state_dict``.

    Parameters
    ----------
    generator : nn.Module
        ``latent_dim``, ``decode(codes)`` (B, D) -> (B, C, H, W) and ``encode(images)`` -> (mean, log-variance).
    flow : CodeFlow, optional
        Fitted on the whitened codes. None: an identity flow (m = 0, L = I), to be fitted by :meth:`fit` or filled
        by ``load_state_dict``.
    code_mean : torch.Tensor, optional
        (D,).
    code_whitening : torch.Tensor, optional
        (D, D), lower triangular.

    Attributes
    ----------
    flow_figures_ : dict
        After :meth:`fit`: :func:`fit_code_flow`'s figures.
    """

    # Defuse's noise where a run names none: its latents are N(0, I) noise, so centred noise surrounds each image's
    # noise (the papers' Beta noise moves every coordinate by about +0.5). Its sd, measured on the SVHN-like
    # stand-in (benchmarks/defuse_real_size.py --sizes 32 --noises default --noise-scale S): 0.15 found and fixed
    # the mislabelled 7s (9 of 16 regions, test accuracy +0.9 points) but made no failure of a 3 where the dark 3s
    # were left out; 0.5 made 223 failures of 3s, three quarters darker than the 3s' median, yet decodings that far
    # from their image were too blurred for the oracle to name (1 region of 27 clusters labelled, none a 3), and
    # the 7s were found in 1 region of 5, test accuracy -1.0 point.
    perturbation_noise = {"noise": "centered", "a": 50.0, "b": 50.0, "noise_scale": 0.15}

    def __init__(self, generator: nn.Module, flow: CodeFlow | None = None, code_mean: torch.Tensor | None = None,
                 code_whitening: torch.Tensor | None = None) -> None:
        super().__init__()
        self.generator = generator
        self.latent_dim = int(generator.latent_dim)
        flow = CodeFlow(self.latent_dim) if flow is None else flow
        code_mean = torch.zeros(self.latent_dim) if code_mean is None else code_mean
        code_whitening = torch.eye(self.latent_dim) if code_whitening is None else code_whitening
        if flow.dim != self.latent_dim or code_mean.shape != (self.latent_dim,):
            raise ProbeError(f"the flow is over {flow.dim} dimensions and the codes' mean over {tuple(code_mean.shape)}"
                             f"; the generator's codes have {self.latent_dim}")
        self.flow = flow
        self.register_buffer("code_mean", code_mean.detach().float().clone())
        self.register_buffer("code_whitening", code_whitening.detach().float().clone())

    def decode(self, noise: torch.Tensor) -> torch.Tensor:
        whitened, _ = self.flow(noise)
        return self.generator.decode(self.code_mean + whitened @ self.code_whitening.T)

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, _ = self.generator.encode(images)
        whitened = torch.linalg.solve_triangular(self.code_whitening, (mean - self.code_mean).T, upper=False).T
        noise, _ = self.flow.inverse(whitened)
        return noise, torch.full_like(noise, -4.0)

    def fit(self, train_images: torch.Tensor, held_out_images: torch.Tensor, batch_size: int = 512,
            reporter: Reporter | None = None, **flow_settings) -> "NoiseFlowGenerator":
        """Fit the flow on the generator's codes of training images (N, C, H, W), stopped where held-out images'
        (M, C, H, W) codes score best (:func:`fit_code_flow`, whose settings ``flow_settings`` pass to); returns
        self.

        Raises
        ------
        ProbeError
            For a generator without ``encode``, or fewer training codes than two per dimension.
        """
        if not callable(getattr(self.generator, "encode", None)):
            raise ProbeError("a flow prior is fitted on the codes of training images: the generator needs encode()")
        device = self.code_mean.device
        with torch.no_grad():
            def codes(images: torch.Tensor) -> torch.Tensor:
                return torch.cat([self.generator.encode(images[start:start + batch_size].to(device))[0].double().cpu()
                                  for start in range(0, len(images), batch_size)])
            train, held_out = codes(train_images), codes(held_out_images)
        count, dim = train.shape
        if count < 2 * dim:
            raise ProbeError(f"a flow prior over {dim} dimensions needs at least {2 * dim} training codes, got {count}")
        mean = train.mean(0)
        covariance = torch.cov((train - mean).T) + 1e-6 * torch.eye(dim, dtype=train.dtype)
        whitening = torch.linalg.cholesky(covariance)

        def whiten(values: torch.Tensor) -> torch.Tensor:
            return torch.linalg.solve_triangular(whitening, (values - mean).T, upper=False).T.float()

        flow, self.flow_figures_ = fit_code_flow(whiten(train), whiten(held_out), reporter=reporter, **flow_settings)
        self.flow = flow.to(device)
        self.code_mean.copy_(mean.float())
        self.code_whitening.copy_(whitening.float())
        return self


def noise_flow_generator(generator: nn.Module, train_images: torch.Tensor, held_out_images: torch.Tensor,
                         batch_size: int = 512, reporter: Reporter | None = None,
                         **flow_settings) -> tuple[NoiseFlowGenerator, dict]:
    """``generator`` seen through a flow prior fitted as :meth:`NoiseFlowGenerator.fit` does, and its figures."""
    if not callable(getattr(generator, "encode", None)):
        raise ProbeError("a flow prior is fitted on the codes of training images: the generator needs encode()")
    flowed = NoiseFlowGenerator(generator).fit(train_images, held_out_images, batch_size, reporter, **flow_settings)
    return flowed, flowed.flow_figures_
