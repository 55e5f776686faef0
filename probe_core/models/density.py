"""A density over a generator's codes, fitted after training, and the generator seen through it.

Bayes-TrEx needs p(z): a VAE brings N(0, I), but an autoencoder trained without a prior (the Defuse authors'
German-signs generator was one: an SSIM autoencoder decoded at μ) has none, and a VAE that underfits leaves
much of N(0, I) decoding to images unlike the data. Regularized autoencoders (Ghosh et al., ICLR 2020) fit a
density on the training codes afterwards; this module fits the simplest one that keeps what the papers' use
cases need: one Gaussian component per class with a covariance shared by all (the model of linear discriminant
analysis), so a class's component is where that class's codes live.

It works in **whitened coordinates**: w = L⁻¹(c − m), with m the codes' mean and L the Cholesky factor of their
covariance. There the codes have mean 0 and covariance I, so the samplers' defaults (step sizes, starts, the
tempered SMC start) fit, and the fitted mixture is the prior of Bayes-TrEx's posterior, a Pyro distribution
that HMC differentiates. :class:`DensityGenerator` decodes whitened codes and encodes images into them, so
Defuse perturbs codes in the same space.
"""

from __future__ import annotations

import pyro.distributions as dist
import torch
from torch import nn

from probe_core.errors import ProbeError

# Added to the shared covariance's diagonal (in whitened units): a class with few codes, or codes on a
# subspace, still gives a proper density.
DEFAULT_RIDGE = 1e-3
# A density is fitted on at least this many codes per code dimension (its covariance needs more codes than dimensions).
MIN_CODES_PER_DIMENSION = 2
# A DensityGenerator's buffers, in the order of ClassCodeDensity.from_fitted's arguments.
DENSITY_BUFFERS = ("code_mean", "code_whitening", "class_means", "class_scale_tril", "class_weights")


def has_codes_enough(codes: int, dimensions: int) -> bool:
    """Whether ``codes`` codes are enough to fit a density over ``dimensions`` dimensions
    (:data:`MIN_CODES_PER_DIMENSION` per dimension)."""
    return codes >= MIN_CODES_PER_DIMENSION * dimensions


class CodeMixture(dist.MixtureSameFamily):
    """A Gaussian mixture over codes whose support is said to be its components' (every real vector).

    torch names a mixture's support with a constraint of its own, which ``biject_to`` cannot transform, so Pyro's
    NUTS (the reference sampler) could not set up a model with the mixture as its prior.
    """

    @property
    def support(self):
        return self.component_distribution.support


class ClassCodeDensity:
    """A Gaussian mixture over codes, one component per class with a shared covariance, in whitened coordinates.

    Follows scikit-learn: ``__init__`` stores the settings, :meth:`fit` returns the estimator, fitted attributes
    end in ``_``.

    Parameters
    ----------
    ridge : float
        Added to the shared covariance's diagonal, in whitened units (default :data:`DEFAULT_RIDGE`).

    Attributes
    ----------
    mean_ : torch.Tensor
        The codes' mean m, shape (D,).
    whitening_ : torch.Tensor
        L, lower triangular (D, D), with L Lᵀ the codes' covariance: w = L⁻¹(c − m).
    means_ : torch.Tensor
        Each class's mean in whitened coordinates, shape (K, D).
    scale_tril_ : torch.Tensor
        Cholesky factor of the shared within-class covariance in whitened coordinates, (D, D).
    weights_ : torch.Tensor
        Each class's share of the codes, shape (K,) (a class without codes gets none).
    """

    def __init__(self, ridge: float = DEFAULT_RIDGE) -> None:
        self.ridge = ridge

    def fit(self, codes: torch.Tensor, labels: torch.Tensor) -> "ClassCodeDensity":
        """Fit on codes (N, D) of images with class indices (N,); returns self.

        Raises
        ------
        ProbeError
            For fewer codes than two per dimension, mismatched lengths, or a ridge that is not positive.
        """
        if not self.ridge > 0:
            raise ProbeError(f"the density's ridge must be positive, got {self.ridge!r}")
        codes = torch.as_tensor(codes, dtype=torch.float64)
        labels = torch.as_tensor(labels, dtype=torch.long)
        if codes.ndim != 2 or len(codes) != len(labels):
            raise ProbeError(f"a code density is fitted on codes (N, D) and N labels, got {tuple(codes.shape)} "
                             f"and {tuple(labels.shape)}")
        count, dim = codes.shape
        if not has_codes_enough(count, dim):
            raise ProbeError(f"a code density in {dim} dimensions needs at least {MIN_CODES_PER_DIMENSION * dim} "
                             f"codes, got {count}")
        self.mean_ = codes.mean(0)
        centred = codes - self.mean_
        covariance = centred.T @ centred / (count - 1) + 1e-9 * torch.eye(dim, dtype=codes.dtype)
        self.whitening_ = torch.linalg.cholesky(covariance)
        whitened = torch.linalg.solve_triangular(self.whitening_, centred.T, upper=False).T
        classes = int(labels.max()) + 1
        counts = torch.bincount(labels, minlength=classes).to(codes.dtype)
        sums = torch.zeros(classes, dim, dtype=codes.dtype).index_add_(0, labels, whitened)
        self.means_ = sums / counts.clamp_min(1)[:, None]
        within = whitened - self.means_[labels]
        shared = within.T @ within / max(count - classes, 1) + self.ridge * torch.eye(dim, dtype=codes.dtype)
        self.scale_tril_ = torch.linalg.cholesky(shared)
        self.weights_ = counts / counts.sum()
        for name in ("mean_", "whitening_", "means_", "scale_tril_", "weights_"):
            setattr(self, name, getattr(self, name).float())
        return self

    @classmethod
    def from_fitted(cls, mean: torch.Tensor, whitening: torch.Tensor, means: torch.Tensor, scale_tril: torch.Tensor,
                    weights: torch.Tensor) -> "ClassCodeDensity":
        """A fitted density from its arrays (those a :class:`DensityGenerator` keeps), shapes as the attributes."""
        density = cls()
        density.mean_, density.whitening_, density.means_ = mean, whitening, means
        density.scale_tril_, density.weights_ = scale_tril, weights
        return density

    def _require_fitted(self) -> None:
        if not hasattr(self, "weights_"):
            raise ProbeError("the code density is not fitted yet: call fit(codes, labels) first")

    def whiten(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (B, D) to whitened coordinates (B, D)."""
        self._require_fitted()
        centred = codes - self.mean_.to(codes)
        return torch.linalg.solve_triangular(self.whitening_.to(codes), centred.T, upper=False).T

    def unwhiten(self, whitened: torch.Tensor) -> torch.Tensor:
        """Whitened coordinates (B, D) back to codes (B, D): m + L w (differentiable)."""
        self._require_fitted()
        return self.mean_.to(whitened) + whitened @ self.whitening_.to(whitened).T

    def distribution(self, batch: int | None = None) -> dist.TorchDistribution:
        """The fitted mixture over whitened codes as a Pyro distribution, event (D,), batch ``(batch,)``."""
        self._require_fitted()
        usable = self.weights_ > 0
        mixture = CodeMixture(
            dist.Categorical(probs=self.weights_[usable], validate_args=False),
            dist.MultivariateNormal(self.means_[usable], scale_tril=self.scale_tril_, validate_args=False),
            validate_args=False)
        return mixture if batch is None else mixture.expand([batch])

    def class_distribution(self, class_index: int, batch: int | None = None) -> dist.TorchDistribution:
        """One class's component (where that class's codes live), event (D,), batch ``(batch,)``."""
        self._require_fitted()
        if not 0 <= class_index < len(self.weights_) or not self.weights_[class_index] > 0:
            raise ProbeError(f"the code density has no component for class {class_index}")
        component = dist.MultivariateNormal(self.means_[class_index], scale_tril=self.scale_tril_,
                                            validate_args=False)
        return component if batch is None else component.expand([batch])

    def sample(self, count: int, generator: torch.Generator, class_index: int | None = None) -> torch.Tensor:
        """``count`` whitened codes (count, D) from the mixture, or from one class's component."""
        self._require_fitted()
        if class_index is None:
            classes = torch.multinomial(self.weights_, count, replacement=True, generator=generator)
        else:
            self.class_distribution(class_index)
            classes = torch.full((count,), class_index, dtype=torch.long)
        noise = torch.randn(count, self.means_.shape[1], generator=generator)
        return self.means_[classes] + noise @ self.scale_tril_.T


class DensityGenerator(nn.Module):
    """A generator with an encoder, seen through a :class:`ClassCodeDensity` fitted on its training codes.

    Its latents are whitened codes: ``decode(w)`` decodes m + L w with the generator, ``encode`` returns the
    whitened means (and log-variances moved by the whitening's scale), and the prior is the fitted mixture, so
    Bayes-TrEx samples where the training codes live and Defuse perturbs codes in the same space. It satisfies
    :class:`~probe_core.sampling.protocols.StructuredPrior` and stays differentiable (HMC, not random walks).

    The density's fitted arrays are buffers, so they travel in the module's ``state_dict`` (a stored model is
    plain tensors) and move with ``.to(device)``.

    Parameters
    ----------
    generator : nn.Module
        ``latent_dim``, ``decode(z)`` (B, D) -> (B, C, H, W) and ``encode(x)`` -> (mean, log-variance).
    density : ClassCodeDensity, optional
        Fitted on ``generator``'s codes of the training images. None: an unfitted placeholder for ``num_classes``
        classes, to be filled by :meth:`fit_density` or ``load_state_dict``.
    class_names : sequence of str, optional
        The data's class names, for :meth:`describe`.
    num_classes : int, optional
        The mixture's component count when ``density`` is None (default: ``len(class_names)``).
    """

    # Defuse's noise where a run names none (read through generator_capabilities): its codes are whitened, and
    # the papers' Beta(75, 75), which moves every coordinate by about +0.5, moves a code of 512 by about 11 of its
    # prior's standard deviations. On the 64x64 sign-like set (benchmarks/defuse_real_size.py --sizes 64) 94 % of
    # such decodings were failures, the generator's rather than the classifier's; centred noise of the run's
    # noise_scale (0.15) surrounds each code and made 24 % failures.
    perturbation_noise = {"noise": "centered", "a": 50.0, "b": 50.0}

    def __init__(self, generator: nn.Module, density: ClassCodeDensity | None = None, class_names=None,
                 num_classes: int | None = None) -> None:
        super().__init__()
        dim = int(generator.latent_dim)
        self.generator = generator
        self.latent_dim = dim
        self.class_names = tuple(class_names) if class_names is not None else None
        if density is None:
            classes = num_classes if num_classes is not None else len(self.class_names or ())
            if classes < 1:
                raise ProbeError("a density generator without a fitted density needs its class count")
            arrays = (torch.zeros(dim), torch.eye(dim), torch.zeros(classes, dim), torch.eye(dim),
                      torch.full((classes,), 1.0 / classes))
        else:
            density._require_fitted()
            if density.mean_.shape[0] != dim:
                raise ProbeError(f"the density is over {density.mean_.shape[0]} dimensions, the generator's codes "
                                 f"have {dim}")
            arrays = (density.mean_, density.whitening_, density.means_, density.scale_tril_, density.weights_)
        for name, value in zip(DENSITY_BUFFERS, arrays):
            self.register_buffer(name, value.clone())

    @property
    def density(self) -> ClassCodeDensity:
        """The fitted density, read from this module's buffers."""
        return ClassCodeDensity.from_fitted(*(getattr(self, name) for name in DENSITY_BUFFERS))

    def fit_density(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512,
                    ridge: float = DEFAULT_RIDGE) -> "DensityGenerator":
        """Fit the density on the generator's mean codes of images (N, C, H, W) with labels (N,); returns self."""
        fitted = fit_code_density(self.generator, images, labels, batch_size, ridge)
        if len(fitted.weights_) > len(self.class_weights):
            raise ProbeError(f"the labels name {len(fitted.weights_)} classes, the density has room for "
                             f"{len(self.class_weights)}")
        weights = torch.zeros_like(self.class_weights)
        weights[:len(fitted.weights_)] = fitted.weights_
        means = torch.zeros_like(self.class_means)
        means[:len(fitted.means_)] = fitted.means_
        for name, value in zip(DENSITY_BUFFERS, (fitted.mean_, fitted.whitening_, means, fitted.scale_tril_, weights)):
            getattr(self, name).copy_(value)
        return self

    def decode(self, whitened: torch.Tensor) -> torch.Tensor:
        return self.generator.decode(self.density.unwhiten(whitened))

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_variance = self.generator.encode(images)
        # a diagonal approximation of the whitening's effect on the posterior's spread
        log_scale = torch.log(torch.diagonal(self.code_whitening).abs())
        return self.density.whiten(mean), log_variance - 2 * log_scale.to(log_variance)

    # -- StructuredPrior ----------------------------------------------------------------------
    def prior_distribution(self, batch: int):
        return self.density.distribution(batch)

    def sample_prior(self, count: int, generator: torch.Generator) -> torch.Tensor:
        return self.density.sample(count, generator)

    # -- ClassConditionalPrior ----------------------------------------------------------------
    def sample_for_targets(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One whitened code per row of ``weights`` (B, K), from the component of a class drawn with those weights
        (restricted to classes with codes); shape (B, D)."""
        usable = (self.class_weights > 0).to(weights)
        chosen = weights.detach().cpu().float() * usable.cpu()
        chosen = torch.where(chosen.sum(1, keepdim=True) > 0, chosen, usable.cpu().expand_as(chosen))
        classes = torch.multinomial(chosen, 1, generator=generator).squeeze(1)
        noise = torch.randn(len(classes), self.latent_dim, generator=generator).to(self.class_means)
        return self.class_means[classes.to(self.class_means.device)] + noise @ self.class_scale_tril.T

    def proposal(self, scale: float | torch.Tensor):
        """A symmetric Gaussian random walk in whitened coordinates (log ratio 0)."""
        def propose(rng: torch.Generator, position: torch.Tensor):
            step = torch.randn(position.shape, generator=rng).to(position)
            scales = torch.as_tensor(scale, dtype=position.dtype, device=position.device)
            scales = scales[:, None] if scales.ndim == 1 else scales
            return position + scales * step, torch.zeros(len(position), device=position.device)
        return propose

    def describe(self, whitened: torch.Tensor) -> str:
        """The class whose component is most likely at this code, with its posterior probability."""
        components = dist.MultivariateNormal(self.class_means, scale_tril=self.class_scale_tril, validate_args=False)
        log_joint = components.log_prob(whitened[None]) + self.class_weights.clamp_min(1e-30).log()
        responsibility = torch.softmax(log_joint, 0)
        best = int(responsibility.argmax())
        name = self.class_names[best] if self.class_names else str(best)
        return f"code nearest the class {name} ({float(responsibility[best]):.0%} of the density there)"


def fit_code_density(generator: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512,
                     ridge: float = DEFAULT_RIDGE) -> ClassCodeDensity:
    """Fit a :class:`ClassCodeDensity` on a generator's mean codes of training images (N, C, H, W).

    Raises
    ------
    ProbeError
        For a generator without ``encode`` (no codes to fit on), or as :meth:`ClassCodeDensity.fit`.
    """
    if not callable(getattr(generator, "encode", None)):
        raise ProbeError("a code density is fitted on the codes of training images: the generator needs encode()")
    with torch.no_grad():
        codes = torch.cat([generator.encode(images[start:start + batch_size])[0]
                           for start in range(0, len(images), batch_size)])
    return ClassCodeDensity(ridge=ridge).fit(codes, labels)
