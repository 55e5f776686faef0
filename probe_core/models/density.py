"""A density over a generator's codes, fitted after training, and the generator seen through it.

Bayes-TrEx needs p(z): a VAE brings N(0, I), but an autoencoder trained without a prior (the Defuse authors'
German-signs generator was one: an SSIM autoencoder decoded at μ) has none, and a VAE that underfits leaves
much of N(0, I) decoding to images unlike the data. Regularized autoencoders (Ghosh et al., ICLR 2020) fit a
density on the training codes afterwards. Two are here, measured side by side in ``benchmarks/generators.py``:

- :class:`KernelCodeDensity` (the default): a kernel density, an isotropic Gaussian of a small bandwidth around
  every training code. It keeps p(z) where the decoder was trained to decode, and each class's codes are where
  that class lives, however its codes are spread;
- :class:`ClassCodeDensity`: one Gaussian component per class with a covariance shared by all (the model of
  linear discriminant analysis). At 64x64 its class components sit between the class's codes, where the decoder
  draws images an independent classifier rarely calls the class.

Both work in **whitened coordinates**: w = L⁻¹(c − m), with m the codes' mean and L the Cholesky factor of their
covariance. There the codes have mean 0 and covariance I, so the samplers' defaults (step sizes, starts, the
tempered SMC start) fit, and the fitted density is the prior of Bayes-TrEx's posterior, a Pyro distribution
that HMC differentiates. :class:`DensityGenerator` decodes whitened codes and encodes images into them, so
Defuse perturbs codes in the same space.
"""

from __future__ import annotations

import abc
import math

import pyro.distributions as dist
import torch
from torch import nn
from torch.distributions import constraints

from probe_core.errors import ProbeError

# Added to the shared covariance's diagonal (in whitened units): a class with few codes, or codes on a
# subspace, still gives a proper density.
DEFAULT_RIDGE = 1e-3
# The kernel density's standard deviation around each training code, in whitened units (where the codes have
# unit variance in every direction). Chosen by measurement (benchmarks/generators.py --size 64): smaller kernels
# keep hits closer to training images, which an independent classifier then calls the class more often; the
# autoencoder's training noise is about 0.1-0.2 in these units, the spread it learnt to decode cleanly.
DEFAULT_BANDWIDTH = 0.2
# The kernel density keeps at most this many training codes (a random subset beyond it): its log density costs
# one (B, D) x (D, M) product per evaluation and its codes travel in the model's weights.
MAX_KERNEL_CODES = 10_000
# A density is fitted on at least this many codes per code dimension (its covariance needs more codes than dimensions).
MIN_CODES_PER_DIMENSION = 2


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


class KernelMixture(dist.TorchDistribution):
    """An equal-weight mixture of isotropic Gaussians of one standard deviation around centres: a kernel density.

    It is ``MixtureSameFamily(Categorical(uniform), Normal(centres, bandwidth).to_event(1))``, computed with one
    matrix product (B, D) x (D, M) instead of that form's (B, M, D) differences: with thousands of centres of
    512 dimensions those would cost HMC hundreds of megabytes per gradient.

    Parameters
    ----------
    centres : torch.Tensor
        (M, D).
    bandwidth : float
        Each component's standard deviation.
    batch_shape : torch.Size, optional
    """

    arg_constraints = {}
    support = constraints.real_vector

    def __init__(self, centres: torch.Tensor, bandwidth: float, batch_shape=torch.Size(), validate_args=None) -> None:
        self.centres, self.bandwidth = centres, float(bandwidth)
        self._squared_norms = centres.pow(2).sum(1)
        super().__init__(torch.Size(batch_shape), centres.shape[1:], validate_args=False)

    def expand(self, batch_shape, _instance=None) -> "KernelMixture":
        return KernelMixture(self.centres, self.bandwidth, batch_shape)

    def component_log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """log N(value; centre_m, bandwidth² I) for every centre: (..., D) -> (..., M)."""
        squared = (value.pow(2).sum(-1, keepdim=True) - 2 * value @ self.centres.T + self._squared_norms).clamp_min(0)
        dimensions = self.centres.shape[1]
        return -squared / (2 * self.bandwidth ** 2) - dimensions * math.log(self.bandwidth * math.sqrt(2 * math.pi))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.component_log_prob(value), -1) - math.log(len(self.centres))

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.batch_shape
        with torch.no_grad():
            chosen = torch.randint(len(self.centres), shape, device=self.centres.device)
            return self.centres[chosen] + self.bandwidth * torch.randn(shape + self.event_shape,
                                                                       device=self.centres.device)


class WhitenedCodeDensity(abc.ABC):
    """What the code densities share: the whitening of the codes, fitted with them, and checks and draws by class.

    Subclasses fit ``mean_``, ``whitening_`` and ``weights_`` (see :meth:`_fit_whitening`) and implement
    :meth:`distribution`, :meth:`class_distribution`, :meth:`sample_for_weights` and :meth:`class_log_joint`.
    """

    # The fitted arrays a DensityGenerator keeps as buffers, keyed by buffer name: attribute name.
    buffers: dict[str, str] = {}

    def _fit_whitening(self, codes: torch.Tensor, labels: torch.Tensor, num_classes: int | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Check codes (N, D) and labels (N,), fit ``mean_``, ``whitening_`` and ``weights_``; return the whitened
        codes (N, D) and the class counts (K,) in float64, the labels as a long tensor (N,), and K."""
        codes = torch.as_tensor(codes, dtype=torch.float64)
        labels = torch.as_tensor(labels, dtype=torch.long)
        if codes.ndim != 2 or len(codes) != len(labels):
            raise ProbeError(f"a code density is fitted on codes (N, D) and N labels, got {tuple(codes.shape)} "
                             f"and {tuple(labels.shape)}")
        count, dim = codes.shape
        if not has_codes_enough(count, dim):
            raise ProbeError(f"a code density in {dim} dimensions needs at least {MIN_CODES_PER_DIMENSION * dim} "
                             f"codes, got {count}")
        classes = int(labels.max()) + 1 if num_classes is None else int(num_classes)
        if int(labels.min()) < 0 or int(labels.max()) >= classes:
            raise ProbeError(f"the labels name classes outside 0..{classes - 1}")
        self.mean_ = codes.mean(0)
        centred = codes - self.mean_
        covariance = centred.T @ centred / (count - 1) + 1e-9 * torch.eye(dim, dtype=codes.dtype)
        self.whitening_ = torch.linalg.cholesky(covariance)
        whitened = torch.linalg.solve_triangular(self.whitening_, centred.T, upper=False).T
        counts = torch.bincount(labels, minlength=classes).to(codes.dtype)
        self.weights_ = counts / counts.sum()
        return whitened, counts, labels, classes

    @classmethod
    def from_fitted(cls, **arrays: torch.Tensor) -> "WhitenedCodeDensity":
        """A fitted density from its arrays, keyed by buffer name (those a :class:`DensityGenerator` keeps)."""
        density = cls.__new__(cls)
        for buffer, attribute in cls.buffers.items():
            setattr(density, attribute, arrays[buffer])
        return density

    def arrays(self) -> dict[str, torch.Tensor]:
        """The fitted arrays keyed by buffer name (float32, or int64 for labels)."""
        self._require_fitted()
        return {buffer: getattr(self, attribute) for buffer, attribute in self.buffers.items()}

    def _require_fitted(self) -> None:
        if not hasattr(self, "weights_"):
            raise ProbeError("the code density is not fitted yet: call fit(codes, labels) first")

    def _require_class(self, class_index: int) -> None:
        self._require_fitted()
        if not 0 <= class_index < len(self.weights_) or not self.weights_[class_index] > 0:
            raise ProbeError(f"the code density has no component for class {class_index}")

    def whiten(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (B, D) to whitened coordinates (B, D)."""
        self._require_fitted()
        centred = codes - self.mean_.to(codes)
        return torch.linalg.solve_triangular(self.whitening_.to(codes), centred.T, upper=False).T

    def unwhiten(self, whitened: torch.Tensor) -> torch.Tensor:
        """Whitened coordinates (B, D) back to codes (B, D): m + L w (differentiable)."""
        self._require_fitted()
        return self.mean_.to(whitened) + whitened @ self.whitening_.to(whitened).T

    def sample(self, count: int, generator: torch.Generator, class_index: int | None = None) -> torch.Tensor:
        """``count`` whitened codes (count, D) from the density, or from one class's part of it."""
        self._require_fitted()
        if class_index is None:
            weights = self.weights_
        else:
            self._require_class(class_index)
            weights = torch.zeros_like(self.weights_)
            weights[class_index] = 1.0
        return self.sample_for_weights(weights.expand(count, -1), generator)

    def class_responsibilities(self, whitened: torch.Tensor) -> torch.Tensor:
        """p(class | w) for whitened codes (B, D): (B, K), zero for classes without codes."""
        return torch.softmax(self.class_log_joint(whitened), -1)

    @abc.abstractmethod
    def distribution(self, batch: int | None = None) -> dist.TorchDistribution:
        """The density over whitened codes as a Pyro distribution, event (D,), batch ``(batch,)``."""

    @abc.abstractmethod
    def class_distribution(self, class_index: int, batch: int | None = None) -> dist.TorchDistribution:
        """One class's part of the density (where that class's codes live), event (D,), batch ``(batch,)``."""

    @abc.abstractmethod
    def sample_for_weights(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One whitened code per row of ``weights`` (B, K), from the part of a class drawn with them; (B, D)."""

    @abc.abstractmethod
    def class_log_joint(self, whitened: torch.Tensor) -> torch.Tensor:
        """log p(w, class) for whitened codes (B, D): (B, K)."""


class ClassCodeDensity(WhitenedCodeDensity):
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

    buffers = {"code_mean": "mean_", "code_whitening": "whitening_", "class_means": "means_",
               "class_scale_tril": "scale_tril_", "class_weights": "weights_"}

    def __init__(self, ridge: float = DEFAULT_RIDGE) -> None:
        self.ridge = ridge

    def fit(self, codes: torch.Tensor, labels: torch.Tensor, num_classes: int | None = None) -> "ClassCodeDensity":
        """Fit on codes (N, D) of images with class indices (N,), over ``num_classes`` classes (default: the
        largest label + 1); returns self.

        Raises
        ------
        ProbeError
            For fewer codes than two per dimension, mismatched lengths, labels outside the classes, or a ridge
            that is not positive.
        """
        if not self.ridge > 0:
            raise ProbeError(f"the density's ridge must be positive, got {self.ridge!r}")
        whitened, counts, labels, classes = self._fit_whitening(codes, labels, num_classes)
        count, dim = whitened.shape
        sums = torch.zeros(classes, dim, dtype=whitened.dtype).index_add_(0, labels, whitened)
        self.means_ = sums / counts.clamp_min(1)[:, None]
        within = whitened - self.means_[labels]
        shared = within.T @ within / max(count - classes, 1) + self.ridge * torch.eye(dim, dtype=whitened.dtype)
        self.scale_tril_ = torch.linalg.cholesky(shared)
        for name in self.buffers.values():
            setattr(self, name, getattr(self, name).float())
        return self

    def _components(self) -> dist.MultivariateNormal:
        return dist.MultivariateNormal(self.means_, scale_tril=self.scale_tril_, validate_args=False)

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
        self._require_class(class_index)
        component = dist.MultivariateNormal(self.means_[class_index], scale_tril=self.scale_tril_,
                                            validate_args=False)
        return component if batch is None else component.expand([batch])

    def sample_for_weights(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One whitened code per row of ``weights`` (B, K), from the component of a class drawn with them; (B, D)."""
        self._require_fitted()
        classes = torch.multinomial(weights.detach().cpu().float(), 1, generator=generator).squeeze(1)
        noise = torch.randn(len(classes), self.means_.shape[1], generator=generator).to(self.means_)
        return self.means_[classes.to(self.means_.device)] + noise @ self.scale_tril_.T

    def class_log_joint(self, whitened: torch.Tensor) -> torch.Tensor:
        """log p(w, class) for whitened codes (B, D): (B, K)."""
        self._require_fitted()
        return self._components().log_prob(whitened[:, None]) + self.weights_.clamp_min(1e-30).log()


class KernelCodeDensity(WhitenedCodeDensity):
    """A kernel density over codes in whitened coordinates: an isotropic Gaussian of standard deviation
    ``bandwidth`` around every training code (a random subset of :data:`MAX_KERNEL_CODES` beyond that many).

    A class's part of it is the kernels around that class's codes, so chains that start there, and the check's
    prior draws, are near codes the decoder was trained on. Follows scikit-learn as :class:`ClassCodeDensity`.

    Parameters
    ----------
    bandwidth : float
        The kernels' standard deviation in whitened units (default :data:`DEFAULT_BANDWIDTH`).
    max_codes : int
        The most training codes kept (default :data:`MAX_KERNEL_CODES`).
    seed : int
        Chooses the subset kept when there are more codes.

    Attributes
    ----------
    mean_, whitening_ : torch.Tensor
        As :class:`ClassCodeDensity`'s: (D,) and (D, D).
    codes_ : torch.Tensor
        The kept training codes in whitened coordinates, (M, D).
    labels_ : torch.Tensor
        Their classes, (M,).
    bandwidth_ : torch.Tensor
        The kernels' standard deviation, a scalar tensor (so that it travels with the arrays).
    weights_ : torch.Tensor
        Each class's share of the kept codes, (K,).
    """

    buffers = {"code_mean": "mean_", "code_whitening": "whitening_", "kernel_codes": "codes_",
               "kernel_labels": "labels_", "kernel_bandwidth": "bandwidth_", "class_weights": "weights_"}

    def __init__(self, bandwidth: float = DEFAULT_BANDWIDTH, max_codes: int = MAX_KERNEL_CODES, seed: int = 0) -> None:
        self.bandwidth = bandwidth
        self.max_codes = max_codes
        self.seed = seed

    def fit(self, codes: torch.Tensor, labels: torch.Tensor, num_classes: int | None = None) -> "KernelCodeDensity":
        """Fit on codes (N, D) of images with class indices (N,), over ``num_classes`` classes (default: the
        largest label + 1); returns self.

        Raises
        ------
        ProbeError
            For fewer codes than two per dimension, mismatched lengths, labels outside the classes, a bandwidth
            that is not positive or fewer than one code to keep.
        """
        if not self.bandwidth > 0:
            raise ProbeError(f"the kernel density's bandwidth must be positive, got {self.bandwidth!r}")
        if not int(self.max_codes) >= 1:
            raise ProbeError(f"the kernel density keeps at least one code, got max_codes={self.max_codes!r}")
        whitened, _, labels, classes = self._fit_whitening(codes, labels, num_classes)
        if len(whitened) > self.max_codes:
            kept = torch.randperm(len(whitened), generator=torch.Generator().manual_seed(self.seed))[:self.max_codes]
            whitened, labels = whitened[kept], labels[kept]
            counts = torch.bincount(labels, minlength=classes).to(whitened.dtype)
            self.weights_ = counts / counts.sum()
        self.codes_, self.labels_ = whitened, labels
        self.bandwidth_ = torch.tensor(float(self.bandwidth))
        for name in ("mean_", "whitening_", "codes_", "weights_"):
            setattr(self, name, getattr(self, name).float())
        return self

    def distribution(self, batch: int | None = None) -> dist.TorchDistribution:
        """The kernel density over whitened codes as a Pyro distribution, event (D,), batch ``(batch,)``."""
        self._require_fitted()
        return KernelMixture(self.codes_, float(self.bandwidth_), () if batch is None else (batch,))

    def class_distribution(self, class_index: int, batch: int | None = None) -> dist.TorchDistribution:
        """The kernels around one class's codes (where that class lives), event (D,), batch ``(batch,)``."""
        self._require_class(class_index)
        return KernelMixture(self.codes_[self.labels_ == class_index], float(self.bandwidth_),
                             () if batch is None else (batch,))

    def sample_for_weights(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One whitened code per row of ``weights`` (B, K): a kept code of a class drawn with those weights (each
        of its codes equally likely), plus the kernel's noise; (B, D)."""
        chosen = self._chosen_codes(weights, generator)
        noise = torch.randn(len(chosen), self.codes_.shape[1], generator=generator).to(self.codes_)
        return self.codes_[chosen] + float(self.bandwidth_) * noise

    def _chosen_codes(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One kept code's index per row of ``weights`` (B, K): a class drawn with those weights, then one of its
        codes, each equally likely; (B,) on the codes' device."""
        self._require_fitted()
        labels = self.labels_.cpu()
        counts = torch.bincount(labels, minlength=len(self.weights_)).float()
        per_code = weights.detach().cpu().float()[:, labels] / counts[labels].clamp_min(1)
        return torch.multinomial(per_code, 1, generator=generator).squeeze(1).to(self.codes_.device)

    def class_log_joint(self, whitened: torch.Tensor) -> torch.Tensor:
        """log p(w, class) for whitened codes (B, D): (B, K), -inf for classes without codes."""
        self._require_fitted()
        kernels = self.distribution().component_log_prob(whitened) - math.log(len(self.codes_))
        joint = torch.full((len(whitened), len(self.weights_)), -math.inf, dtype=kernels.dtype,
                           device=kernels.device)
        for class_index in self.labels_.unique().tolist():
            joint[:, class_index] = torch.logsumexp(kernels[:, self.labels_ == class_index], -1)
        return joint


# Manifold Parzen windows (Vincent & Bengio, NIPS 2002): each kernel also spreads along the directions to its
# nearest same-class codes, so a chain can walk from one training code towards its neighbours instead of staying in
# the isotropic kernel it starts in (at 32x32, codes sit a median 22 whitened units apart, 100x the kernels' 0.2).
DEFAULT_NEIGHBOURS = 8
# The spread along those directions: a kernel's draw moves by about this share of the way to its neighbours.
DEFAULT_SPREAD = 0.5
# The log density is summed over this many components nearest each point (LowRankKernelMixture.log_prob).
NEAREST_COMPONENTS = 64


class LowRankKernelMixture(dist.TorchDistribution):
    """An equal-weight mixture of Gaussians N(c_m, σ² I + V_m V_mᵀ), each with a low-rank part V_m (D, k).

    The log density of every component uses Woodbury's identity: with A_m = I + V_mᵀ V_m / σ² = C_m C_mᵀ and
    G_m = V_m C_m⁻ᵀ, the quadratic form is |r|²/σ² − |G_mᵀ r|²/σ⁴ and log det = D log σ² + 2 Σ log diag C_m, so one
    evaluation is a (B, D) x (D, M·k) product and nothing of size (B, M, D).

    Parameters
    ----------
    centres : torch.Tensor
        (M, D).
    bandwidth : float
        σ, the isotropic part's standard deviation.
    factors : torch.Tensor
        (M, D, k), each component's low-rank part V_m.
    batch_shape : torch.Size, optional
    """

    arg_constraints = {}
    support = constraints.real_vector

    def __init__(self, centres: torch.Tensor, bandwidth: float, factors: torch.Tensor, batch_shape=torch.Size(),
                 validate_args=None, _prepared: tuple | None = None) -> None:
        self.centres, self.bandwidth, self.factors = centres, float(bandwidth), factors
        if _prepared is None:
            count, dim, rank = factors.shape
            capacitance = torch.eye(rank, dtype=factors.dtype, device=factors.device) + \
                factors.transpose(1, 2) @ factors / self.bandwidth ** 2
            cholesky = torch.linalg.cholesky(capacitance)  # (M, k, k)
            # G_m = V_m C_m^-T: solve C_m X = V_m^T for X = G_m^T
            projections = torch.linalg.solve_triangular(cholesky, factors.transpose(1, 2), upper=False)  # (M, k, D)
            flat = projections.reshape(count * rank, dim)
            offsets = (projections @ centres[:, :, None]).squeeze(2)  # (M, k): G_m^T c_m
            log_det = dim * math.log(self.bandwidth ** 2) + 2 * torch.log(torch.diagonal(cholesky, dim1=1, dim2=2)).sum(1)
            _prepared = (flat, offsets, log_det, centres.pow(2).sum(1))
        self._prepared = _prepared
        super().__init__(torch.Size(batch_shape), centres.shape[1:], validate_args=False)

    def expand(self, batch_shape, _instance=None) -> "LowRankKernelMixture":
        return LowRankKernelMixture(self.centres, self.bandwidth, self.factors, batch_shape, _prepared=self._prepared)

    def component_log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """log N(value; c_m, σ² I + V_m V_mᵀ) for every component: (..., D) -> (..., M)."""
        flat, offsets, log_det, squared_norms = self._prepared
        count, dim = self.centres.shape
        squared = (value.pow(2).sum(-1, keepdim=True) - 2 * value @ self.centres.T + squared_norms).clamp_min(0)
        along = (value @ flat.T).reshape(*value.shape[:-1], count, -1) - offsets  # G_m^T (x - c_m)
        return self._gaussian_log_prob(squared, along, log_det)

    def _gaussian_log_prob(self, squared: torch.Tensor, along: torch.Tensor, log_det: torch.Tensor) -> torch.Tensor:
        """log N from Woodbury's parts: |x − c_m|² (..., M), G_mᵀ(x − c_m) (..., M, k) and log det (..., M)."""
        quadratic = squared / self.bandwidth ** 2 - along.pow(2).sum(-1) / self.bandwidth ** 4
        return -0.5 * (quadratic.clamp_min(0) + log_det + self.centres.shape[1] * math.log(2 * math.pi))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """log p(value), (..., D) -> (...): over the :data:`NEAREST_COMPONENTS` components nearest each value (in
        ℓ2) where there are more; the rest add nothing a float can hold (their isotropic part alone is tens of
        thousands of nats away), and a chain's gradient costs (B, D) x (D, M) plus (B, T, k, D) instead of
        (B, D) x (D, M·k)."""
        count = len(self.centres)
        if count <= NEAREST_COMPONENTS:
            return torch.logsumexp(self.component_log_prob(value), -1) - math.log(count)
        flat, offsets, log_det, squared_norms = self._prepared
        rank, dim = offsets.shape[1], self.centres.shape[1]
        rows = value.reshape(-1, dim)
        squared = (rows.pow(2).sum(-1, keepdim=True) - 2 * rows @ self.centres.T + squared_norms).clamp_min(0)
        squared, nearest = squared.topk(NEAREST_COMPONENTS, dim=1, largest=False)  # (B, T)
        projections = flat.reshape(count, rank, dim)[nearest]  # (B, T, k, D)
        along = torch.einsum("btkd,bd->btk", projections, rows) - offsets[nearest]
        components = self._gaussian_log_prob(squared, along, log_det[nearest])
        return (torch.logsumexp(components, -1) - math.log(count)).reshape(value.shape[:-1])

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.batch_shape
        with torch.no_grad():
            chosen = torch.randint(len(self.centres), shape, device=self.centres.device).reshape(-1)
            return draw_low_rank(self.centres[chosen], self.factors[chosen], self.bandwidth, None).reshape(
                *shape, self.centres.shape[1])


def draw_low_rank(centres: torch.Tensor, factors: torch.Tensor, bandwidth: float,
                  generator: torch.Generator | None) -> torch.Tensor:
    """One draw of N(c, σ² I + V Vᵀ) per row of the chosen components' centres (B, D) and low-rank parts
    (B, D, k): c + σ n + V g; (B, D)."""
    noise = torch.randn(len(centres), centres.shape[1], generator=generator).to(centres)
    along = torch.randn(len(centres), factors.shape[2], generator=generator).to(centres)
    return centres + bandwidth * noise + (factors @ along[:, :, None]).squeeze(2)


class ManifoldCodeDensity(KernelCodeDensity):
    """Manifold Parzen windows over codes in whitened coordinates: around every training code a Gaussian of
    standard deviation ``bandwidth`` in every direction and ``spread`` of the way along the directions to its
    ``neighbours`` nearest codes of the same class, so that the density is high on the paths between a class's
    codes and a chain can walk from one to the next (:class:`KernelCodeDensity` keeps it in the kernel it starts).

    Follows scikit-learn as :class:`KernelCodeDensity`; its fitted arrays are those plus ``neighbours_`` (M, k), the
    kept codes' neighbours (by index into ``codes_``) and ``spread_``. The low-rank parts are rebuilt from them, so
    a stored model holds no (M, D, k) array.

    Parameters
    ----------
    bandwidth : float
        The isotropic part, whitened units (default :data:`DEFAULT_BANDWIDTH`).
    neighbours : int
        k, same-class neighbours per code (default :data:`DEFAULT_NEIGHBOURS`).
    spread : float
        The share of the way to the neighbours a draw moves, in standard deviations (default :data:`DEFAULT_SPREAD`).
    max_codes, seed
        As :class:`KernelCodeDensity`.
    """

    buffers = {**KernelCodeDensity.buffers, "kernel_neighbours": "neighbours_", "kernel_spread": "spread_"}

    def __init__(self, bandwidth: float = DEFAULT_BANDWIDTH, neighbours: int = DEFAULT_NEIGHBOURS,
                 spread: float = DEFAULT_SPREAD, max_codes: int = MAX_KERNEL_CODES, seed: int = 0) -> None:
        super().__init__(bandwidth, max_codes, seed)
        self.neighbours = neighbours
        self.spread = spread

    def fit(self, codes: torch.Tensor, labels: torch.Tensor, num_classes: int | None = None) -> "ManifoldCodeDensity":
        """As :meth:`KernelCodeDensity.fit`, then each kept code's nearest same-class kept codes; returns self.

        Raises
        ------
        ProbeError
            As :meth:`KernelCodeDensity.fit`, or for fewer than one neighbour or a spread that is not positive.
        """
        if not int(self.neighbours) >= 1 or not self.spread > 0:
            raise ProbeError(f"manifold kernels need at least one neighbour and a positive spread, got "
                             f"neighbours={self.neighbours!r}, spread={self.spread!r}")
        super().fit(codes, labels, num_classes)
        rank = int(self.neighbours)
        neighbours = torch.arange(len(self.codes_))[:, None].repeat(1, rank)  # a lone code: its own (no spread)
        for class_index in self.labels_.unique().tolist():
            members = (self.labels_ == class_index).nonzero().squeeze(1)
            if len(members) < 2:
                continue
            distances = torch.cdist(self.codes_[members], self.codes_[members])
            distances.fill_diagonal_(math.inf)
            nearest = distances.topk(min(rank, len(members) - 1), largest=False).indices
            chosen = members[nearest]
            neighbours[members] = torch.cat([chosen, chosen[:, :1].repeat(1, rank - chosen.shape[1])], 1)
        self.neighbours_ = neighbours
        self.spread_ = torch.tensor(float(self.spread))
        return self

    def _factors(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """V_m = spread / √k · (neighbours − c_m), (M, D, k) (of ``rows`` only, when given)."""
        rows = torch.arange(len(self.codes_), device=self.codes_.device) if rows is None else rows
        neighbours = self.neighbours_.to(self.codes_.device)[rows]
        directions = self.codes_[neighbours] - self.codes_[rows][:, None, :]  # (M, k, D)
        return (float(self.spread_) / math.sqrt(neighbours.shape[1])) * directions.transpose(1, 2)

    def _mixture(self, class_index: int | None, batch: int | None) -> LowRankKernelMixture:
        """The mixture of all kernels (``class_index`` None) or of one class's; its Woodbury parts are prepared once
        per fitted arrays and kept (:data:`_PREPARED_MIXTURES`)."""
        rows = None if class_index is None else (self.labels_ == class_index).nonzero().squeeze(1).to(
            self.codes_.device)
        centres = self.codes_ if rows is None else self.codes_[rows]
        key = (self.codes_.data_ptr(), str(self.codes_.device), tuple(self.codes_.shape), float(self.spread_),
               float(self.bandwidth_), class_index)
        prepared = _PREPARED_MIXTURES.pop(key, None)
        mixture = LowRankKernelMixture(centres, float(self.bandwidth_), self._factors(rows),
                                       () if batch is None else (batch,), _prepared=prepared)
        _PREPARED_MIXTURES[key] = mixture._prepared
        while len(_PREPARED_MIXTURES) > _KEPT_MIXTURES:  # each holds (M·k, D) floats
            _PREPARED_MIXTURES.pop(next(iter(_PREPARED_MIXTURES)))
        return mixture

    def distribution(self, batch: int | None = None) -> dist.TorchDistribution:
        """The mixture over whitened codes as a Pyro distribution, event (D,), batch ``(batch,)``."""
        self._require_fitted()
        return self._mixture(None, batch)

    def class_distribution(self, class_index: int, batch: int | None = None) -> dist.TorchDistribution:
        """The kernels around one class's codes, event (D,), batch ``(batch,)``."""
        self._require_class(class_index)
        return self._mixture(class_index, batch)

    def sample_for_weights(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One whitened code per row of ``weights`` (B, K): a kernel of a class drawn with those weights, and a draw
        of it; (B, D)."""
        chosen = self._chosen_codes(weights, generator)
        return draw_low_rank(self.codes_[chosen], self._factors(chosen), float(self.bandwidth_), generator)

_PREPARED_MIXTURES: dict = {}  # the Woodbury parts of recent mixtures, by fitted arrays and class
_KEPT_MIXTURES = 4

# Most specific first: a stored model's density kind is the first whose buffers it holds all of.
DENSITY_KINDS = (ManifoldCodeDensity, KernelCodeDensity, ClassCodeDensity)


class DensityGenerator(nn.Module):
    """A generator with an encoder, seen through a density fitted on its training codes.

    Its latents are whitened codes: ``decode(w)`` decodes m + L w with the generator, ``encode`` returns the
    whitened means (and log-variances moved by the whitening's scale), and the prior is the fitted density, so
    Bayes-TrEx samples where the training codes live and Defuse perturbs codes in the same space. It satisfies
    :class:`~probe_core.sampling.protocols.StructuredPrior` and stays differentiable (HMC, not random walks).

    The density's fitted arrays are buffers, so they travel in the module's ``state_dict`` (a stored model is
    plain tensors) and move with ``.to(device)``. Which density a stored model holds is read from its arrays'
    names when it is loaded, so models stored with the class Gaussians before the kernel density became the
    default load as they were.

    Parameters
    ----------
    generator : nn.Module
        ``latent_dim``, ``decode(z)`` (B, D) -> (B, C, H, W) and ``encode(x)`` -> (mean, log-variance).
    density : KernelCodeDensity or ClassCodeDensity, optional
        Fitted on ``generator``'s codes of the training images. None: an unfitted placeholder for ``num_classes``
        classes, to be filled by :meth:`fit_density` or ``load_state_dict``.
    class_names : sequence of str, optional
        The data's class names, for :meth:`describe`.
    num_classes : int, optional
        The class count when ``density`` is None (default: ``len(class_names)``).
    """

    # Defuse's noise where a run names none (read through generator_capabilities): its codes are whitened, and
    # the papers' Beta(75, 75), which moves every coordinate by about +0.5, moves a code of 512 by about 11 of its
    # prior's standard deviations. On the 64x64 sign-like set (benchmarks/defuse_real_size.py --sizes 64) 94 % of
    # such decodings were failures, the generator's rather than the classifier's; centred noise of the run's
    # noise_scale (0.15) surrounds each code and made 24 % failures.
    perturbation_noise = {"noise": "centered", "a": 50.0, "b": 50.0, "noise_scale": 0.15}

    def __init__(self, generator: nn.Module, density: WhitenedCodeDensity | None = None, class_names=None,
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
            density = KernelCodeDensity.from_fitted(
                code_mean=torch.zeros(dim), code_whitening=torch.eye(dim), kernel_codes=torch.zeros(classes, dim),
                kernel_labels=torch.arange(classes), kernel_bandwidth=torch.tensor(DEFAULT_BANDWIDTH),
                class_weights=torch.full((classes,), 1.0 / classes))
        self._hold(density)

    def _hold(self, density: WhitenedCodeDensity) -> None:
        """Keep ``density``'s fitted arrays as this module's buffers (replacing another kind's)."""
        arrays = density.arrays()
        dim = self.latent_dim
        if arrays["code_mean"].shape[0] != dim:
            raise ProbeError(f"the density is over {arrays['code_mean'].shape[0]} dimensions, the generator's codes "
                             f"have {dim}")
        device = next(iter(self._buffers.values())).device if self._buffers else arrays["code_mean"].device
        for kind in DENSITY_KINDS:
            for name in kind.buffers:
                self._buffers.pop(name, None)
        self._density_kind = type(density)
        for name, value in arrays.items():
            self.register_buffer(name, value.detach().clone().to(device))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # Take on the stored density's kind and array shapes first (a kernel density's codes are as many as the
        # training images it was fitted on), then let torch copy the values in as usual.
        for kind in DENSITY_KINDS:
            stored = {name: state_dict.get(prefix + name) for name in kind.buffers}
            if all(value is not None for value in stored.values()):
                self._hold(kind.from_fitted(**stored))
                break
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    @property
    def density(self) -> WhitenedCodeDensity:
        """The fitted density, read from this module's buffers."""
        return self._density_kind.from_fitted(**{name: getattr(self, name) for name in self._density_kind.buffers})

    def fit_density(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512,
                    estimator: WhitenedCodeDensity | None = None) -> "DensityGenerator":
        """Fit a density on the generator's mean codes of images (N, C, H, W) with labels (N,); returns self.

        ``estimator`` is an unfitted :class:`KernelCodeDensity` (the default) or :class:`ClassCodeDensity`.
        """
        classes = len(self.class_weights)
        if int(torch.as_tensor(labels).max()) >= classes:
            raise ProbeError(f"the labels name {int(torch.as_tensor(labels).max()) + 1} classes, the density has "
                             f"room for {classes}")
        self._hold(fit_code_density(self.generator, images, labels, batch_size, estimator, num_classes=classes))
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
        """One whitened code per row of ``weights`` (B, K), from the part of the density of a class drawn with
        those weights (restricted to classes with codes); shape (B, D)."""
        usable = (self.class_weights > 0).cpu().float()
        chosen = weights.detach().cpu().float() * usable
        chosen = torch.where(chosen.sum(1, keepdim=True) > 0, chosen, usable.expand_as(chosen))
        return self.density.sample_for_weights(chosen, generator)

    def proposal(self, scale: float | torch.Tensor):
        """A symmetric Gaussian random walk in whitened coordinates (log ratio 0)."""
        def propose(rng: torch.Generator, position: torch.Tensor):
            step = torch.randn(position.shape, generator=rng).to(position)
            scales = torch.as_tensor(scale, dtype=position.dtype, device=position.device)
            scales = scales[:, None] if scales.ndim == 1 else scales
            return position + scales * step, torch.zeros(len(position), device=position.device)
        return propose

    def describe(self, whitened: torch.Tensor) -> str:
        """The class whose part of the density is most likely at this code, with its posterior probability."""
        responsibility = self.density.class_responsibilities(whitened.reshape(1, -1))[0]
        best = int(responsibility.argmax())
        name = self.class_names[best] if self.class_names else str(best)
        return f"code nearest the class {name} ({float(responsibility[best]):.0%} of the density there)"


def fit_code_density(generator: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512,
                     estimator: WhitenedCodeDensity | None = None, num_classes: int | None = None
                     ) -> WhitenedCodeDensity:
    """Fit a code density on a generator's mean codes of training images (N, C, H, W) with labels (N,).

    ``estimator`` is an unfitted :class:`KernelCodeDensity` (the default) or :class:`ClassCodeDensity`;
    ``num_classes`` as its ``fit``.

    Raises
    ------
    ProbeError
        For a generator without ``encode`` (no codes to fit on), or as the estimator's ``fit``.
    """
    if not callable(getattr(generator, "encode", None)):
        raise ProbeError("a code density is fitted on the codes of training images: the generator needs encode()")
    with torch.no_grad():
        codes = torch.cat([generator.encode(images[start:start + batch_size])[0]
                           for start in range(0, len(images), batch_size)])
    estimator = KernelCodeDensity() if estimator is None else estimator
    return estimator.fit(codes, labels, num_classes)
