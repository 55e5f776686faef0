"""Defuse distillation: a Dirichlet-process Gaussian mixture over failure codes, and what each cluster shows.

:class:`FailureClusterer` follows scikit-learn's conventions (arguments stored
in ``__init__``, ``fit`` returns ``self``, fitted attributes end in ``_``).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from probe_core.data import is_real_size
from probe_core.errors import ProbeError

NOT_IN_A_CLUSTER = -1
# The review spread τ (review and correction samples from N(μ, τΣ)): Model Probe's MNIST setting, and the papers'
# for their colour data sets (SVHN, German signs). On the SVHN-like stand-in, τ = 0.5 drew review images of several
# digits from one cluster, all finetuned on under the region's one label: correcting the planted flaw's regions
# cost 7 points of test accuracy; at 0.01 it cost none beyond finetuning itself (measured by hand on the
# benchmark's runs; benchmarks/defuse_real_size.py runs the result).
REVIEW_TAU = 0.5
REAL_SIZE_REVIEW_TAU = 0.01


def review_tau(image_shape: tuple[int, int, int]) -> float:
    """The review spread τ for images of ``image_shape`` (C, H, W) when none is given: :data:`REAL_SIZE_REVIEW_TAU`
    for real-size images (32x32 and up, :func:`~probe_core.data.is_real_size`), else :data:`REVIEW_TAU`."""
    return REAL_SIZE_REVIEW_TAU if is_real_size(tuple(image_shape)) else REVIEW_TAU


# Codes of more than PROJECT_CODES_ABOVE dimensions (the spatial autoencoder's 512 at 64x64) are clustered in their
# first PROJECTED_CODE_SIZE principal components. On the 64x64 sign-like stand-in's 23,508 failures (a run of
# benchmarks/defuse_real_size.py), the mixture on the 512-d codes kept 6 broad clusters, the planted flaw's failures
# in one of 14,793; on 16, 32 or 64 components (measured by hand on the same failures) 80 of them, one image's
# perturbations, formed a cluster of their own. The papers' codes are 15-d and are not projected.
PROJECT_CODES_ABOVE = 64
PROJECTED_CODE_SIZE = 32
# The fewest failures a cluster kept for its share of one class's failures holds (FailureClusterer.class_share).
MIN_CLASS_REGION = 20


def projection_for(code_size: int) -> int:
    """The principal components to cluster codes of ``code_size`` dimensions in (0: the codes themselves)."""
    return PROJECTED_CODE_SIZE if code_size > PROJECT_CODES_ABOVE else 0


class FailureClusterer:
    """Distil failure latents into clusters (Defuse Sec. 3.2).

    A ``BayesianGaussianMixture`` with a Dirichlet-process prior and full
    covariances is fitted on a random subsample; components whose mixing weight
    is at most ``weight_threshold`` are dropped.

    Full covariances in hundreds of dimensions (a spatial autoencoder's codes) leave a few broad components that
    bury a small failure region. With ``projection_dim`` set below the codes' size D, the mixture is fitted on the
    codes' first ``projection_dim`` principal components instead, and each kept component is mapped back into the
    code space in the manner of probabilistic PCA (Tipping & Bishop): its mean is the mean of the codes it is
    responsible for (weighted by responsibility) and its covariance ``W Σ Wᵀ + σ² I``, with ``W`` the principal
    directions, ``Σ`` its fitted covariance and ``σ²`` its codes' mean variance in the discarded directions. Review
    and correction samples are then drawn in the generator's own code space, as without projection. (A mean made
    of ``d`` principal components alone decodes to a blur: on the 64x64 sign-like stand-in the oracle called
    nearly every such review image one class.)

    With ``class_share`` set, :meth:`fit` takes each failure's true class too, and a component is also kept when at
    least ``min_class_region`` failures fall in it and they hold at least ``class_share`` of all failures of the
    class most of them show. The weight threshold alone keeps only what is common among *all* failures: where a
    few classes fail everywhere (a classifier weak on some classes), a class it otherwise knows, and its one
    failure mode (a planted or a real flaw), is dropped however clear that mode is.

    Parameters
    ----------
    n_components : int
        Upper bound K on the number of mixture components (paper: 100).
    weight_threshold : float
        ε: components with weight ≤ ε are dropped (paper: 0.01).
    max_samples : int
        At most this many codes (a random subsample) are used to fit; all are assigned.
    weight_concentration_prior : float, optional
        The Dirichlet-process concentration (scikit-learn's default 1/K when None).
    max_iter : int
        Variational inference iterations.
    random_state : int
        Seeds the subsample and the mixture's initialisation.
    projection_dim : int, optional
        Fit on this many principal components of the codes (None, or at least D: the codes themselves).
    class_share : float, optional
        Also keep components holding this share of one class's failures (None: the weight threshold alone).
    min_class_region : int
        The fewest failures a component kept by ``class_share`` holds.

    Attributes
    ----------
    mixture_ : BayesianGaussianMixture
        The fitted mixture, all K components (in projected coordinates where ``projection_`` is set).
    components_ : np.ndarray
        (J,) indices into the mixture of the kept components, heaviest first.
    weights_ : np.ndarray
        (J,) mixing weights of the kept components (as fitted, not renormalised).
    means_ : np.ndarray
        (J, D).
    covariances_ : np.ndarray
        (J, D, D).
    labels_ : np.ndarray
        (N,) kept-cluster index of each fitted code, or -1 where its most likely
        component was dropped.
    n_clusters_ : int
        J.
    projection_ : sklearn.decomposition.PCA or None
        The fitted projection, None when the mixture is fitted on the codes themselves.
    converged_ : bool
        Whether variational inference converged within ``max_iter``.
    """

    def __init__(self, n_components: int = 100, weight_threshold: float = 0.01, max_samples: int = 10_000,
                 weight_concentration_prior: float | None = None, max_iter: int = 300, random_state: int = 0,
                 projection_dim: int | None = None, class_share: float | None = None,
                 min_class_region: int = MIN_CLASS_REGION) -> None:
        self.n_components = n_components
        self.weight_threshold = weight_threshold
        self.max_samples = max_samples
        self.weight_concentration_prior = weight_concentration_prior
        self.max_iter = max_iter
        self.random_state = random_state
        self.projection_dim = projection_dim
        self.class_share = class_share
        self.min_class_region = min_class_region

    def _validate(self, latents: np.ndarray) -> np.ndarray:
        latents = np.asarray(latents, dtype=np.float64)
        if latents.ndim != 2:
            raise ProbeError(f"FailureClusterer.fit wants (N, D) latents, got shape {latents.shape}")
        if not np.isfinite(latents).all():
            raise ProbeError("failure latents contain NaN or infinite values")
        if len(latents) < 2:
            raise ProbeError(f"need at least 2 failures to cluster, got {len(latents)}")
        if self.n_components < 1 or not 0 <= self.weight_threshold < 1 or self.max_samples < 2:
            raise ProbeError("n_components must be ≥ 1, weight_threshold in [0, 1) and max_samples ≥ 2")
        if self.projection_dim is not None and self.projection_dim < 1:
            raise ProbeError(f"projection_dim must be ≥ 1 or None, got {self.projection_dim}")
        if self.class_share is not None and not 0 < self.class_share <= 1:
            raise ProbeError(f"class_share must be in (0, 1] or None, got {self.class_share}")
        return latents

    def fit(self, latents: np.ndarray, classes: np.ndarray | None = None) -> "FailureClusterer":
        """Fit on (N, D) failure latents; returns ``self``.

        ``classes`` (N,): each failure's true class, needed (and only used) with ``class_share``.
        """
        from sklearn.decomposition import PCA
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import BayesianGaussianMixture

        latents = self._validate(latents)
        if self.class_share is not None:
            if classes is None or np.shape(classes) != (len(latents),):
                raise ProbeError("FailureClusterer with class_share needs each failure's true class: fit(latents, "
                                 "classes) with classes of shape (N,)")
            classes = np.asarray(classes, dtype=np.int64)
        rng = np.random.default_rng(self.random_state)
        subsample = latents
        if len(latents) > self.max_samples:
            subsample = latents[rng.choice(len(latents), self.max_samples, replace=False)]
        self.projection_ = None
        if self.projection_dim is not None and self.projection_dim < min(subsample.shape):
            self.projection_ = PCA(self.projection_dim, random_state=self.random_state).fit(subsample)
            subsample = self.projection_.transform(subsample)
        with warnings.catch_warnings():  # non-convergence is reported through converged_, not a warning
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.mixture_ = BayesianGaussianMixture(
                n_components=min(self.n_components, len(subsample)),
                covariance_type="full",
                weight_concentration_prior_type="dirichlet_process",
                weight_concentration_prior=self.weight_concentration_prior,
                max_iter=self.max_iter,
                random_state=self.random_state,
            ).fit(subsample)
        self.converged_ = bool(self.mixture_.converged_)
        weights = self.mixture_.weights_
        kept = np.flatnonzero(weights > self.weight_threshold)
        coordinates = self._coordinates(latents)
        components = self.mixture_.predict(coordinates)  # of all K, for every code (not only the subsample)
        if self.class_share is not None:
            kept = np.union1d(kept, self._components_holding_a_class(components, classes))
        self.components_ = kept[np.argsort(-weights[kept], kind="stable")]
        self.weights_ = weights[self.components_]
        self.means_, self.covariances_ = self._in_code_space(latents, coordinates)
        self.n_clusters_ = len(self.components_)
        self.labels_ = self._kept_index(components)
        return self

    def _coordinates(self, latents: np.ndarray) -> np.ndarray:
        """(N, d) the coordinates the mixture is fitted in: the codes' principal components, or the (N, D) codes."""
        return self.projection_.transform(latents) if self.projection_ is not None else latents

    def _kept_index(self, components: np.ndarray) -> np.ndarray:
        """(N,) the kept-cluster index of each of the K components in ``components``, -1 for a dropped one."""
        lookup = np.full(self.mixture_.n_components, NOT_IN_A_CLUSTER, dtype=np.int64)
        lookup[self.components_] = np.arange(self.n_clusters_)
        return lookup[components]

    def _components_holding_a_class(self, components: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Components whose failures, at least ``min_class_region``, hold ``class_share`` of their majority class's."""
        per_class = np.bincount(classes)
        holding = []
        for component in np.unique(components):
            members = classes[components == component]
            if len(members) < self.min_class_region:
                continue
            member_classes, counts = np.unique(members, return_counts=True)
            if counts.max() >= self.class_share * per_class[member_classes[counts.argmax()]]:
                holding.append(component)
        return np.asarray(holding, dtype=np.int64)

    def _in_code_space(self, latents: np.ndarray, coordinates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The kept components' (J, D) means and (J, D, D) covariances in the space of the (N, D) codes, whose
        mixture coordinates are ``coordinates`` (:meth:`_coordinates`)."""
        means = self.mixture_.means_[self.components_]
        covariances = self.mixture_.covariances_[self.components_]
        if self.projection_ is None:
            return means, covariances
        basis = self.projection_.components_  # (d, D), orthonormal rows
        responsibilities = self.mixture_.predict_proba(coordinates)[:, self.components_]
        mass = np.maximum(responsibilities.sum(0), 1e-12)  # (J,)
        code_means = (responsibilities.T @ latents) / mass[:, None]
        spreads = np.empty(len(code_means))
        for index, mean in enumerate(code_means):
            centred = latents - mean
            residual = centred - (centred @ basis.T) @ basis
            spreads[index] = responsibilities[:, index] @ (residual ** 2).sum(1) / (mass[index] * max(
                basis.shape[1] - basis.shape[0], 1))
        within = np.einsum("di,jde,ek->jik", basis, covariances, basis)
        return code_means, within + spreads[:, None, None] * np.eye(basis.shape[1])

    def predict(self, latents: np.ndarray) -> np.ndarray:
        """Kept-cluster index of each (N, D) code, -1 where its most likely component was dropped."""
        if not hasattr(self, "mixture_"):
            raise ProbeError("FailureClusterer is not fitted yet; call fit() first")
        latents = np.asarray(latents, dtype=np.float64)
        if len(latents) == 0:
            return np.zeros(0, dtype=np.int64)
        return self._kept_index(self.mixture_.predict(self._coordinates(latents)))


def sample_cluster_latents(mean: np.ndarray, covariance: np.ndarray, count: int, tau: float,
                           rng: np.random.Generator) -> np.ndarray:
    """Codes z ~ N(μ, τ·Σ), shape (count, D), float32 (Defuse's review and correction samples)."""
    if tau <= 0:
        raise ProbeError(f"tau must be positive, got {tau}")
    return rng.multivariate_normal(np.asarray(mean, np.float64), tau * np.asarray(covariance, np.float64),
                                   size=count, method="cholesky").astype(np.float32)


@torch.no_grad()
def decode_and_classify(vae: torch.nn.Module, classifier: torch.nn.Module, latents: np.ndarray,
                        batch_size: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode (N, D) codes and classify them: images (N, C, H, W) and probabilities (N, K), on the CPU."""
    device = next(vae.parameters()).device
    images, probs = [], []
    for start in range(0, len(latents), batch_size):
        decoded = vae.decode(torch.as_tensor(latents[start:start + batch_size], device=device))
        images.append(decoded.cpu())
        probs.append(classifier(decoded).float().cpu())
    if not images:
        raise ProbeError("no latents to decode")
    return torch.cat(images), torch.cat(probs)


def majority(values: np.ndarray) -> tuple[int | None, float]:
    """Most common non-negative integer and its share (None, 0.0 when empty)."""
    values = np.asarray(values, dtype=np.int64)
    if len(values) == 0:
        return None, 0.0
    counts = np.bincount(values)
    winner = int(counts.argmax())
    return winner, float(counts[winner] / len(values))


def describe_clusters(clusterer: FailureClusterer, predictions: np.ndarray, true_labels: np.ndarray) -> list[dict]:
    """Per kept cluster: weight, size and the majority prediction and true label of its failures.

    Parameters
    ----------
    predictions, true_labels : np.ndarray
        (N,) for the codes the clusterer was fitted on (aligned with ``labels_``).
    """
    described = []
    for index in range(clusterer.n_clusters_):
        members = clusterer.labels_ == index
        prediction, prediction_share = majority(predictions[members])
        true_label, true_label_share = majority(true_labels[members])
        described.append({
            "cluster_index": index,
            "component": int(clusterer.components_[index]),
            "weight": float(clusterer.weights_[index]),
            "size": int(members.sum()),
            "majority_prediction": prediction,
            "prediction_share": prediction_share,
            "majority_true_label": true_label,
            "true_label_share": true_label_share,
            "mean": clusterer.means_[index].astype(np.float32),
            "covariance": clusterer.covariances_[index].astype(np.float32),
        })
    return described


