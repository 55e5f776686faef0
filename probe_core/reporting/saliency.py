"""SmoothGrad saliency (Captum ``NoiseTunnel(Saliency(model))``) and heat-map overlays for display."""

from __future__ import annotations

import numpy as np
import torch

from probe_core.errors import ProbeError

# The dashboard computes saliency in the server's own process: a forged widget value must not make it average
# thousands of noisy copies of a batch (the page offers up to 200).
MAX_SMOOTHGRAD_SAMPLES = 500
MAX_SMOOTHGRAD_IMAGES = 64


def smoothgrad(classifier: torch.nn.Module, images: torch.Tensor, target: int | torch.Tensor, *,
               noise_level: float = 0.15, samples: int = 50, seed: int = 0) -> torch.Tensor:
    """SmoothGrad maps of the probability of ``target`` (Smilkov et al. 2017) via Captum.

    Parameters
    ----------
    classifier : nn.Module
        Images (B, C, H, W) in [0, 1] -> probabilities (B, K).
    images : torch.Tensor
        (B, C, H, W).
    target : int or torch.Tensor
        The class to explain, one for all images or (B,).
    noise_level : float
        Standard deviation of the Gaussian input noise, as a fraction of the [0, 1] pixel range.
    samples : int
        Noisy copies averaged per image, from 1 to :data:`MAX_SMOOTHGRAD_SAMPLES`.

    Returns
    -------
    torch.Tensor
        (B, H, W) non-negative maps, each scaled to a maximum of 1 (all zero if the gradient is).
    """
    from captum.attr import NoiseTunnel, Saliency

    if images.ndim != 4:
        raise ProbeError(f"saliency wants images (B, C, H, W), got shape {tuple(images.shape)}")
    if not 0 <= noise_level <= 1:
        raise ProbeError(f"noise_level is a fraction of the pixel range from 0 to 1, got {noise_level!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SMOOTHGRAD_SAMPLES:
        raise ProbeError(f"SmoothGrad averages from 1 to {MAX_SMOOTHGRAD_SAMPLES} noisy copies, got {samples!r}")
    if len(images) > MAX_SMOOTHGRAD_IMAGES:
        raise ProbeError(f"SmoothGrad explains at most {MAX_SMOOTHGRAD_IMAGES} images at a time, got {len(images)}")
    if not torch.isfinite(images).all():
        raise ProbeError("the images contain NaN or infinite values")
    was_training = classifier.training
    classifier.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attribution = NoiseTunnel(Saliency(classifier)).attribute(
            images.detach().clone().requires_grad_(True), nt_type="smoothgrad", nt_samples=samples,
            stdevs=float(noise_level), target=target)
    classifier.train(was_training)
    maps = attribution.abs().sum(dim=1).detach()
    peak = maps.flatten(1).max(dim=1).values.clamp_min(1e-12)
    return maps / peak[:, None, None]


def overlay(image: torch.Tensor | np.ndarray, saliency: torch.Tensor | np.ndarray, alpha: float = 0.6) -> np.ndarray:
    """A (H, W, 3) uint8 picture: the image in grey with the saliency map in red on top.

    ``image`` is (C, H, W) in [0, 1]; ``saliency`` is (H, W) in [0, 1].
    """
    image = np.asarray(image, dtype=np.float32)
    heat = np.asarray(saliency, dtype=np.float32)
    grey = image.mean(axis=0)
    base = np.repeat(grey[..., None], 3, axis=2)
    red = np.zeros_like(base)
    red[..., 0] = 1.0
    mix = (alpha * heat)[..., None]
    return (np.clip(base * (1 - mix) + red * mix, 0, 1) * 255).round().astype(np.uint8)
