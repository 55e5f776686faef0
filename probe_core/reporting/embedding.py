"""2-D maps of codes for display (UMAP), shared by Bayes-TrEx's latent maps and Defuse's failure maps."""

from __future__ import annotations

import functools

import numpy as np

from probe_core.errors import ProbeError


@functools.cache
def _umap_with_cached_kernels():
    """The ``umap`` module, its numba kernels cached on disk (imported on first use: the import takes seconds).

    umap compiles its k-NN graph and layout kernels without ``cache=True``, so every new process that draws a map
    compiled them again: about 10 s of a map's 12 s in each worker process. Caching them (numba's own
    ``Dispatcher.enable_caching``, what ``cache=True`` does) makes that a once-per-installation cost; numba keys the
    cache on the source file, so an upgraded umap compiles afresh. Where numba finds no writable cache location,
    the kernels compile per process as before.
    """
    import umap
    import umap.layouts
    import umap.umap_
    import umap.utils

    for module in (umap.umap_, umap.utils, umap.layouts):
        for kernel in vars(module).values():
            if callable(getattr(kernel, "enable_caching", None)):
                try:
                    kernel.enable_caching()
                except RuntimeError:  # numba: "cannot cache function ...: no locator available"
                    return umap
    return umap


def embed_2d(latents: np.ndarray, max_fit: int = 5000, n_neighbors: int = 15, seed: int = 0) -> np.ndarray:
    """A 2-D map of (N, D) codes for display: UMAP on at most ``max_fit`` of them, the rest placed by k-NN.

    UMAP's own ``transform`` costs about 4 ms per point on 2 cores, too slow for
    100,000 failures; placing the remaining points at the distance-weighted mean
    position of their 10 nearest fitted neighbours takes about a second and keeps
    clusters where UMAP put them. Returns (N, 2) float32.
    """
    from sklearn.neighbors import KNeighborsRegressor

    umap = _umap_with_cached_kernels()

    latents = np.asarray(latents, dtype=np.float32)
    if len(latents) < 3:
        raise ProbeError(f"need at least 3 points to embed, got {len(latents)}")
    rng = np.random.default_rng(seed)
    fitted = np.arange(len(latents))
    if len(latents) > max_fit:
        fitted = np.sort(rng.choice(len(latents), max_fit, replace=False))
    reducer = umap.UMAP(n_neighbors=min(n_neighbors, len(fitted) - 1), random_state=seed, n_jobs=1)
    coordinates = np.zeros((len(latents), 2), dtype=np.float32)
    coordinates[fitted] = reducer.fit_transform(latents[fitted])
    rest = np.setdiff1d(np.arange(len(latents)), fitted)
    if len(rest):
        placer = KNeighborsRegressor(n_neighbors=min(10, len(fitted)), weights="distance")
        coordinates[rest] = placer.fit(latents[fitted], coordinates[fitted]).predict(latents[rest])
    return coordinates
