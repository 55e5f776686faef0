"""SmoothGrad saliency (Captum ``NoiseTunnel(Saliency(model))``) and heat-map overlays for display."""

from __future__ import annotations

import numpy as np
import torch

from probe_core.errors import ProbeError


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
        Noisy copies averaged per image.

    Returns
    -------
    torch.Tensor
        (B, H, W) non-negative maps, each scaled to a maximum of 1 (all zero if the gradient is).
    """
    from captum.attr import NoiseTunnel, Saliency

    if images.ndim != 4:
        raise ProbeError(f"saliency wants images (B, C, H, W), got shape {tuple(images.shape)}")
    if noise_level < 0 or samples < 1:
        raise ProbeError("noise_level must be ≥ 0 and samples ≥ 1")
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
