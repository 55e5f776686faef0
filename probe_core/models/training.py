"""Training for the model zoo, deterministic for a seed, with progress.

Each ``train_*`` function returns ``(module, metrics)`` and reports to its
:class:`~probe_core.progress.Reporter` after every epoch (:func:`report_epoch`); a stop
(:class:`probe_core.errors.CancelledError`, raised by the reporter) ends training.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from probe_core.data import ImageDataset
from probe_core.errors import ProbeError
from probe_core.progress import Report, Reporter, rewritten
from probe_core.models.architectures import (
    CLASSIFIER_ARCHITECTURES,
    VAE,
    ConvClassifier,
    GANDiscriminator,
    GANGenerator,
    ResNetClassifier,
    make_vae,
)

# A VAE's perceptual term compares images in the features of a small ResNet (see :class:`FeatureStages`):
# "random" a randomly initialised one, "trained" one trained on the data's labels first. Nothing of it is kept
# with the generator's weights; the registry stores a trained one as a classifier of its own
# (ModelSpec.feature_network_spec).
PERCEPTUAL_NETWORKS = ("random", "trained")
# A generator's trained feature network has the generator's seed plus this: another network than the classifiers of
# the generator's seed (the data's default one among them), so it can judge them at no training cost.
FEATURE_NETWORK_SEED_OFFSET = 7919
# The pixel term's weight beside the features' three: at 1 a 32x32 colour VAE kept the digits and lost the colours
# (reconstruction ratio 0.63), at 4 it kept both (0.31); a random network's features kept neither shape nor digit.
PERCEPTUAL_PIXEL_WEIGHT = 4.0


# What an epoch's report carries in its details (:func:`report_epoch`).
EPOCH_DETAILS = ("kind", "epoch", "epochs", "loss", "metric_name", "metric")


def epoch_report(kind: str, epoch: int, epochs: int, loss: float, metric_name: str, metric: float) -> Report:
    """One epoch's report: progress ``epoch / epochs``, a line, and details ``kind``, ``epoch``, ``epochs``,
    ``loss``, ``metric_name`` and ``metric`` (named by ``metric_name``, e.g. test accuracy), forced at the last."""
    return (epoch / max(epochs, 1),
            f"{kind} epoch {epoch}/{epochs}: loss {loss:.4g}, {metric_name.replace('_', ' ')} {metric:.4g}",
            {"kind": kind, "epoch": epoch, "epochs": epochs, "loss": loss, "metric_name": metric_name,
             "metric": metric}, epoch == epochs)


def report_epoch(reporter: Reporter | None, kind: str, epoch: int, epochs: int, loss: float, metric_name: str,
                 metric: float) -> None:
    """Tell ``reporter`` (None: nobody) one epoch's :func:`epoch_report`."""
    if reporter is not None:
        reporter.report(*epoch_report(kind, epoch, epochs, loss, metric_name, metric))


def epochs_of(reporter: Reporter | None, kind: str, before: int, total: int) -> Reporter | None:
    """``reporter`` for a stage of ``kind``'s training that comes after ``before`` of its ``total`` epochs: the
    stage's epoch reports become epochs ``before + 1 ...`` of ``total`` (a VAE's feature network, then the VAE:
    one bar from 0 to 1); other reports pass as they are."""
    def as_epoch_of_total(progress, message, details, force):
        if details is None or "epoch" not in details:
            return progress, message, details, force
        return epoch_report(kind, before + details["epoch"], total, details["loss"], details["metric_name"],
                            details["metric"])

    return rewritten(reporter, as_epoch_of_total)


def adam(parameters, learning_rate: float, betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.Adam:
    """Adam as every model here trains with it: the fused update (one kernel per tensor).

    The models are small, so the per-tensor loop of PyTorch's default CPU update was a large share of a step; the
    fused one trained the digits VAE in 0.74x the time and the GAN in 0.87x (one thread). Its results differ from
    the loop's in the last digits only.
    """
    return torch.optim.Adam(parameters, lr=learning_rate, betas=betas, fused=True)


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """Flush denormal floats to zero while a generator trains (on CPUs that support it; elsewhere a no-op).

    Adam's second-moment estimates of weights whose gradients are tiny decay into denormal floats, which a CPU
    computes with many times slower: on a user's 72 colour images of 8x8 the VAE's 2,000 steps took 19 s, and
    7 s flushed (one thread; the GAN's time did not change). Values below 1e-38 become zero, nothing else
    changes. PyTorch's default (not flushed) is restored after: it has no getter to restore another state from.
    """
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def _batches(num_items: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    order = torch.randperm(num_items, generator=generator)
    for start in range(0, num_items, batch_size):
        yield order[start:start + batch_size]


def ambiguous_soft_targets(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Soft targets with 0.5 on y and 0.5 on (y + 1) mod K, shape (N, K)."""
    targets = torch.zeros(len(labels), num_classes)
    targets[torch.arange(len(labels)), labels] = 0.5
    targets[torch.arange(len(labels)), (labels + 1) % num_classes] += 0.5
    return targets


# Images per forward pass when a model is only evaluated. On 2 CPU cores the real-size ResNet classified 2,000 32x32
# images in 0.76 s in batches of 128 and 1.5-1.8 s in batches of 2,048 (whose activations leave the caches); every
# training epoch and every epoch of a correction's sweep evaluates.
EVALUATION_BATCH = 128


@torch.no_grad()
def classifier_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                        batch_size: int = EVALUATION_BATCH) -> float:
    """Top-1 accuracy of a classifier (logits or probabilities) on (N, C, H, W) images."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, len(images), batch_size):
        out = model(images[start:start + batch_size].to(device))
        correct += int((out.argmax(1).cpu() == labels[start:start + batch_size]).sum())
    model.train(was_training)
    return correct / max(len(images), 1)


def augment_batch(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Standard augmentation for real-size images: a random crop of the image padded by 1/8 of its size
    (reflected), and for colour images a random brightness and contrast change of up to 20 %. No flips:
    digits and signs are not mirror-symmetric.

    Parameters
    ----------
    images : torch.Tensor
        Shape (B, C, H, W) in [0, 1].
    generator : torch.Generator
        The CPU generator drawing the shifts and changes (seeded: training is repeatable).

    Returns
    -------
    torch.Tensor
        Shape (B, C, H, W) in [0, 1].
    """
    count, channels, height, width = images.shape
    pad = max(1, height // 8)
    padded = F.pad(images, (pad, pad, pad, pad), mode="reflect")
    rows = torch.randint(0, 2 * pad + 1, (count,), generator=generator)
    columns = torch.randint(0, 2 * pad + 1, (count,), generator=generator)
    row_index = (rows[:, None] + torch.arange(height)[None, :]).to(images.device)  # (B, H)
    column_index = (columns[:, None] + torch.arange(width)[None, :]).to(images.device)  # (B, W)
    batch_index = torch.arange(count, device=images.device)[:, None, None, None]
    channel_index = torch.arange(channels, device=images.device)[None, :, None, None]
    cropped = padded[batch_index, channel_index, row_index[:, None, :, None], column_index[:, None, None, :]]
    if channels == 1:
        return cropped
    brightness = (torch.rand(count, 1, 1, 1, generator=generator) * 0.4 - 0.2).to(images.device)
    contrast = (torch.rand(count, 1, 1, 1, generator=generator) * 0.4 + 0.8).to(images.device)
    mean = cropped.mean(dim=(1, 2, 3), keepdim=True)
    return ((cropped - mean) * contrast + mean + brightness).clamp(0.0, 1.0)


def train_classifier(
    dataset: ImageDataset,
    *,
    epochs: int = 20,
    batch_size: int = 64,
    learning_rate: float = 2e-3,
    ambiguous: bool = False,
    seed: int = 0,
    device: str | torch.device = "cpu",
    reporter: Reporter | None = None,
    architecture: str = "ConvClassifier",
    augment: bool = False,
) -> tuple[ConvClassifier, dict]:
    """Train the zoo CNN on a data set (or a class-subset view of it).

    Parameters
    ----------
    dataset : ImageDataset
        Train images (N, C, H, W) and labels (N,).
    ambiguous : bool
        Train the "always ambiguous" variant: KL divergence to soft targets with
        0.5 on y and 0.5 on (y + 1) mod K, as in Bayes-TrEx Sec. 4.5.
    architecture : str
        A name in :data:`CLASSIFIER_ARCHITECTURES`.
    augment : bool
        Train on :func:`augment_batch` views of the images (the real-size recipe).

    Returns
    -------
    model : ConvClassifier
        In eval mode; ``forward`` gives logits.
    metrics : dict
        ``test_accuracy`` (fraction) and, for the ambiguous variant,
        ``test_mean_top2_mass`` (mean probability on the two target classes).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if architecture not in CLASSIFIER_ARCHITECTURES:
            raise ValueError(f"unknown classifier architecture {architecture!r}; "
                             f"use one of {', '.join(CLASSIFIER_ARCHITECTURES)}")
        model = CLASSIFIER_ARCHITECTURES[architecture](dataset.image_shape, dataset.num_classes).to(device)
        shuffler = torch.Generator().manual_seed(seed)
        optimiser = adam(model.parameters(), learning_rate)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=max(epochs, 1))
        images, labels = dataset.train_images, dataset.train_labels
        soft = ambiguous_soft_targets(labels, dataset.num_classes) if ambiguous else None
        for epoch in range(1, epochs + 1):
            model.train()
            total, count = 0.0, 0
            for index in _batches(len(images), batch_size, shuffler):
                batch = images[index].to(device)
                if augment:
                    batch = augment_batch(batch, shuffler)
                logits = model(batch)
                if soft is not None:
                    loss = F.kl_div(F.log_softmax(logits, 1), soft[index].to(device), reduction="batchmean")
                else:
                    loss = F.cross_entropy(logits, labels[index].to(device))
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += loss.item() * len(index)
                count += len(index)
            schedule.step()
            accuracy = classifier_accuracy(model, dataset.test_images, dataset.test_labels)
            report_epoch(reporter, "classifier", epoch, epochs, total / count, "test_accuracy", accuracy)
    model.eval()
    metrics = {"test_accuracy": classifier_accuracy(model, dataset.test_images, dataset.test_labels)}
    if ambiguous:
        with torch.no_grad():
            probs = torch.softmax(model(dataset.test_images.to(device)), 1).cpu()
        target = ambiguous_soft_targets(dataset.test_labels, dataset.num_classes)
        metrics["test_mean_top2_mass"] = float((probs * (target > 0)).sum(1).mean())
    return model, metrics


def vae_loss(model: VAE, images: torch.Tensor, beta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Negative ELBO per image (Bernoulli likelihood, nats) and reconstruction MSE per pixel.

    Returns
    -------
    neg_elbo : torch.Tensor
        Shape (B,).
    mse : torch.Tensor
        Shape (B,).
    """
    recon_logits, mu, logvar = model(images)
    nll = F.binary_cross_entropy_with_logits(recon_logits, images, reduction="none").flatten(1).sum(1)
    kl = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(1)
    mse = (torch.sigmoid(recon_logits) - images).pow(2).flatten(1).mean(1)
    return nll + beta * kl, mse


class FeatureStages(nn.Module):
    """The outputs of a :class:`ResNetClassifier`'s three residual stages, for a perceptual loss.

    Shapes (B, 16, H', W'), (B, 32, H'/2, W'/2), (B, 64, H'/4, W'/4) for images (B, C, H, W), H' = H / stem
    stride. Frozen and in eval mode: gradients flow to the images only.
    """

    def __init__(self, resnet: ResNetClassifier) -> None:
        super().__init__()
        stem, stages = resnet.body[:3], resnet.body[3:6]
        self.stem, self.stages = stem, stages
        self.eval()
        for parameter in self.parameters():
            parameter.requires_grad_(False)

    def train(self, mode: bool = True) -> "FeatureStages":
        return super().train(False)  # batch statistics stay those it was made with

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        hidden = self.stem(images.contiguous(memory_format=torch.channels_last))
        outputs = []
        for stage in self.stages:
            hidden = stage(hidden)
            outputs.append(hidden)
        return outputs


def perceptual_epochs(kind: str | None, vae_epochs: int, requested: int | None = None) -> int:
    """Epochs of training the perceptual network takes (0 for none or a random one): ``requested``, else a third
    of the VAE's."""
    if kind != "trained":
        return 0
    return int(requested) if requested else max(1, vae_epochs // 3)


def perceptual_pixel_weight(image_shape: tuple[int, int, int]) -> float:
    """The pixel term's weight in :func:`perceptual_vae_loss` for images of ``image_shape`` (C, H, W).

    :data:`PERCEPTUAL_PIXEL_WEIGHT` up to 32x32, falling with the square of the pixels' count above: the pixel term
    sums over the pixels while the feature network's strided stem keeps its features' size, so at 64x64 the
    weight of 32x32 let the pixels outweigh the features. Measured on the 64x64 sign-like stand-in (its 85.7 %
    classifier, feature network 2,500 steps, VAE 4,900): at weight 4 its reconstructions kept the class of 0.40x as
    many held-out images as the images and its samples' sharpness was 0.38x the data's; at 1 (the 32x32 balance
    of pixels and features) 0.61x and 0.47x; at 0.25 (this rule) 0.63x and 0.91x, with the classifier's
    confidence on samples 0.63x that on the data (0.43x at 1). Not measured above 64x64.
    """
    pixels = image_shape[1] * image_shape[2]
    return PERCEPTUAL_PIXEL_WEIGHT * min(1.0, (32 * 32 / pixels) ** 2)


def perceptual_network(dataset: ImageDataset, kind: str, seed: int = 0, device: str | torch.device = "cpu",
                       reporter: Reporter | None = None, epochs: int = 8,
                       trained: ResNetClassifier | None = None) -> FeatureStages:
    """The feature network of a VAE's perceptual term (:data:`PERCEPTUAL_NETWORKS`).

    ``"trained"``: a :class:`ResNetClassifier` trained on the data's labels for ``epochs`` with augmentation
    (its own seed, the generator's plus :data:`FEATURE_NETWORK_SEED_OFFSET`: it is never the classifier being
    probed), or ``trained``, that network trained already (the registry stores it as a classifier of its own:
    :meth:`~probe_core.models.spec.ModelSpec.feature_network_spec`); ``"random"``: one with random weights.
    """
    if kind not in PERCEPTUAL_NETWORKS:
        raise ProbeError(f"perceptual network {kind!r}: choose one of {', '.join(PERCEPTUAL_NETWORKS)}")
    if kind == "random":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + FEATURE_NETWORK_SEED_OFFSET)
            return FeatureStages(ResNetClassifier(dataset.image_shape, dataset.num_classes)).to(device)
    if trained is None:
        trained, _ = train_classifier(dataset, epochs=epochs, seed=seed + FEATURE_NETWORK_SEED_OFFSET, device=device,
                                      reporter=reporter, architecture="ResNetClassifier", augment=True)
    return FeatureStages(trained).to(device)


def _gaussian_nll(squared_error: torch.Tensor) -> torch.Tensor:
    """Per-item Gaussian negative log-likelihood with the batch's optimal shared variance (the sigma-VAE's
    calibrated decoder, Rybkin et al. 2021), shape (B,), for squared errors of shape (B, ...)."""
    variance = squared_error.mean().detach().clamp_min(1e-6)
    count = squared_error[0].numel()
    return 0.5 * squared_error.flatten(1).sum(1) / variance + 0.5 * count * torch.log(variance)


def perceptual_vae_loss(model: VAE, images: torch.Tensor, features: FeatureStages, beta: float = 1.0,
                        pixel_weight: float = PERCEPTUAL_PIXEL_WEIGHT) -> torch.Tensor:
    """Negative ELBO of a VAE whose likelihood covers pixels and features (a deep-feature-consistent VAE, Hou
    et al. 2017, with sigma-VAE Gaussians per term), shape (B,).

    A pixel loss alone spends a small decoder on what carries the most pixel energy (backgrounds, colour
    patches) and draws the digit as a blur; the features' term makes strokes and shapes count.
    """
    recon_logits, mu, logvar = model(images)
    reconstruction = torch.sigmoid(recon_logits)
    nll = pixel_weight * _gaussian_nll((reconstruction - images).pow(2))
    with torch.no_grad():
        targets = features(images)
    for produced, target in zip(features(reconstruction), targets):
        nll = nll + _gaussian_nll((produced - target).pow(2))
    kl = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(1)
    return nll + beta * kl


@torch.no_grad()
def evaluate_vae(model: VAE, images: torch.Tensor, seed: int = 0) -> dict:
    """Test ELBO (nats per image, higher is better) and reconstruction MSE per pixel."""
    model.eval()
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        neg_elbo, mse = vae_loss(model, images.to(device))
        mu, _ = model.encode(images.to(device))
        mse_at_mean = (model.decode(mu) - images.to(device)).pow(2).flatten(1).mean(1)
    return {
        "test_elbo": -float(neg_elbo.mean()),
        "test_reconstruction_mse": float(mse_at_mean.mean()),
        "test_reconstruction_mse_sampled": float(mse.mean()),
    }


def train_vae(
    dataset: ImageDataset,
    *,
    latent_dim: int | None = None,
    epochs: int = 150,
    batch_size: int = 64,
    learning_rate: float = 2e-3,
    seed: int = 0,
    device: str | torch.device = "cpu",
    reporter: Reporter | None = None,
    architecture: str | None = None,
    kl_warmup_epochs: int = 0,
    beta: float = 1.0,
    perceptual: str | None = None,
    augment: bool = False,
    feature_epochs: int | None = None,
    feature_network: ResNetClassifier | None = None,
) -> tuple[VAE, dict]:
    """Train the zoo VAE; metrics are :func:`evaluate_vae` on the test split.

    ``architecture`` is ``"MLPVAE"`` or ``"VAE"`` (convolutional); default by image size.
    ``beta`` weighs the KL term (a β-VAE for β > 1; 1: the ELBO). ``kl_warmup_epochs``: that
    weight rises linearly from β/W to β over the first W epochs (0: β throughout). The metrics
    are the plain ELBO's whatever β, so that VAEs of different β compare. ``perceptual``: one of
    :data:`PERCEPTUAL_NETWORKS` trains with :func:`perceptual_vae_loss` in that network's features (the
    real-size recipe), None with the Bernoulli ELBO. ``augment``: each batch through :func:`augment_batch` (the
    real-size recipe: on 8,000 SVHN-like images a VAE trained without it kept the class of 91 % of its training
    images' reconstructions but 71 % of held-out ones). ``feature_epochs``: epochs of training a "trained"
    perceptual network (default a third of the VAE's), or ``feature_network``, that network trained already (its
    epochs then count as done in the progress reports); the pixel term's weight is
    :func:`perceptual_pixel_weight` of the images' size.
    """
    latent_dim = int(latent_dim or dataset.default_latent_dim)
    features, first = None, perceptual_epochs(perceptual, epochs, feature_epochs)
    pixel_weight = perceptual_pixel_weight(dataset.image_shape)
    if perceptual is not None:  # its epochs come first in the progress reports: one bar from 0 to 1
        features = perceptual_network(dataset, perceptual, seed, device, epochs_of(reporter, "vae", 0, first + epochs),
                                      first, feature_network)
    reporter = epochs_of(reporter, "vae", first, first + epochs)
    with torch.random.fork_rng(devices=[]), denormals_flushed():
        torch.manual_seed(seed)
        model = make_vae(dataset.image_shape, latent_dim, architecture).to(device)
        shuffler = torch.Generator().manual_seed(seed)
        optimiser = adam(model.parameters(), learning_rate)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=max(epochs, 1))
        images = dataset.train_images
        for epoch in range(1, epochs + 1):
            model.train()
            total, count = 0.0, 0
            kl_weight = beta * (min(1.0, epoch / kl_warmup_epochs) if kl_warmup_epochs > 0 else 1.0)
            for index in _batches(len(images), batch_size, shuffler):
                batch = images[index].to(device)
                if augment:
                    batch = augment_batch(batch, shuffler)
                if features is None:
                    neg_elbo, _ = vae_loss(model, batch, beta=kl_weight)
                else:
                    neg_elbo = perceptual_vae_loss(model, batch, features, beta=kl_weight, pixel_weight=pixel_weight)
                loss = neg_elbo.mean()
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += loss.item() * len(index)
                count += len(index)
            schedule.step()
            report_epoch(reporter, "vae", epoch, epochs, total / count, "train_elbo", -total / count)
        metrics = evaluate_vae(model, dataset.test_images, seed)
    model.eval()
    return model, metrics


def train_gan(
    dataset: ImageDataset,
    *,
    latent_dim: int | None = None,
    epochs: int = 150,
    batch_size: int = 64,
    learning_rate: float = 2e-4,
    seed: int = 0,
    device: str | torch.device = "cpu",
    reporter: Reporter | None = None,
) -> tuple[GANGenerator, dict]:
    """Train a DCGAN-style GAN with the non-saturating loss; returns the generator.

    The epoch metric is the share of generated images the discriminator calls real
    (about 0.5 when the two are balanced). Quality metrics that need a classifier
    are added by the registry (see :func:`feature_frechet_distance`).
    """
    latent_dim = int(latent_dim or dataset.default_latent_dim)
    with torch.random.fork_rng(devices=[]), denormals_flushed():
        torch.manual_seed(seed)
        generator = GANGenerator(dataset.image_shape, latent_dim).to(device)
        discriminator = GANDiscriminator(dataset.image_shape).to(device)
        shuffler = torch.Generator().manual_seed(seed)
        opt_g = adam(generator.parameters(), learning_rate, betas=(0.5, 0.999))
        opt_d = adam(discriminator.parameters(), learning_rate, betas=(0.5, 0.999))
        images = dataset.train_images
        for epoch in range(1, epochs + 1):
            generator.train()
            discriminator.train()
            total_g, fooled, count = 0.0, 0.0, 0
            for index in _batches(len(images), batch_size, shuffler):
                real = images[index].to(device)
                z = torch.randn(len(index), latent_dim, device=device)
                fake = generator.decode(z)
                d_real, d_fake = discriminator(real), discriminator(fake.detach())
                loss_d = F.binary_cross_entropy_with_logits(d_real, torch.full_like(d_real, 0.9)) + \
                    F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
                opt_d.zero_grad(set_to_none=True)
                loss_d.backward()
                opt_d.step()
                d_fake = discriminator(fake)
                loss_g = F.binary_cross_entropy_with_logits(d_fake, torch.ones_like(d_fake))
                opt_g.zero_grad(set_to_none=True)
                loss_g.backward()
                opt_g.step()
                total_g += loss_g.item() * len(index)
                fooled += float((d_fake > 0).float().sum())
                count += len(index)
            report_epoch(reporter, "gan", epoch, epochs, total_g / count, "fooled_fraction", fooled / count)
    generator.eval()
    return generator, {}


@torch.no_grad()
def _features(classifier: nn.Module, images: torch.Tensor, batch_size: int = 2048) -> np.ndarray:
    device = next(iter(classifier.parameters()), torch.empty(0)).device
    chunks = [classifier.features(images[s:s + batch_size].to(device)).cpu() for s in range(0, len(images), batch_size)]
    return torch.cat(chunks).double().numpy()


def frechet_distance(features_a: np.ndarray, features_b: np.ndarray) -> float:
    """Fréchet distance between Gaussian fits of two feature sets, each (N, D)."""
    from scipy import linalg

    mu_a, mu_b = features_a.mean(0), features_b.mean(0)
    # A small ridge keeps sqrtm stable when ReLU features have dead units (singular covariances).
    ridge = 1e-6 * np.eye(features_a.shape[1])
    cov_a = np.cov(features_a, rowvar=False) + ridge
    cov_b = np.cov(features_b, rowvar=False) + ridge
    covmean = linalg.sqrtm(cov_a @ cov_b)
    covmean = np.real(covmean)
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a + cov_b - 2.0 * covmean))


@torch.no_grad()
def feature_frechet_distance(
    classifier: nn.Module, generator: nn.Module, real_images: torch.Tensor, num_samples: int = 2000, seed: int = 0
) -> float:
    """FD-clf: Fréchet distance of generated to real images on a classifier's penultimate features.

    A stand-in for FID, which needs Inception weights that cannot be downloaded
    here; values are comparable only between generators scored with the same
    classifier on the same data set. Lower is better.
    """
    classifier.eval()
    generator.eval()
    device = next(generator.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        z = torch.randn(num_samples, generator.latent_dim, device=device)
    generated = torch.cat([generator.decode(z[s:s + 1024]).cpu() for s in range(0, num_samples, 1024)])
    return frechet_distance(_features(classifier, real_images), _features(classifier, generated))
