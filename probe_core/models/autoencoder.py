"""The zoo's second generator family: a regularized autoencoder with a density fitted on its codes (issue 68).

The Defuse authors' German-signs generator was a deterministic SSIM autoencoder at 64x64 (four stride-2
convolutions of 64 channels down to 4x4, a code of 15); Bayes-TrEx needs a prior over codes, which a regularized
autoencoder gets afterwards (Ghosh et al., ICLR 2020: an ex-post density on the training codes). Here:

- :class:`ConvAutoencoder`: that encoder and decoder, deterministic, with a flat code;
- :func:`autoencoder_loss` / :func:`train_autoencoder`: pixels + SSIM (``pytorch_msssim``, the authors' loss) + a
  feature network of its own (never the probed classifier), an L2 penalty on codes and noise on them in training;
- :class:`DensityAutoencoder`: the trained network seen through a
  :class:`~probe_core.models.density.KernelCodeDensity` (a small Gaussian kernel around every training code,
  whitened), so Bayes-TrEx's HMC samples where the training codes live and Defuse perturbs the same whitened codes.
"""

from __future__ import annotations

import torch
from pytorch_msssim import ssim
from torch import nn

from probe_core.data import ImageDataset
from probe_core.errors import ProbeError
from probe_core.models.architectures import ResNetClassifier, _check_shape
from probe_core.models.code_flow import NoiseFlowGenerator
from probe_core.models.density import DensityGenerator
from probe_core.models.training import (
    FeatureStages,
    _batches,
    adam,
    augment_batch,
    denormals_flushed,
    epochs_of,
    perceptual_epochs,
    perceptual_network,
    report_epoch,
)
from probe_core.progress import Reporter


# A spatial code's maps: the encoder halves the image until a side is this.
SPATIAL_CODE_SIDE = 8


def halvings(height: int, width: int, smallest: int) -> tuple[int, int, int]:
    """How :class:`ConvAutoencoder`'s stride-2 convolutions shrink an image: ``(levels, height, width)`` after
    halving both sides while both are even and above ``smallest``."""
    levels = 0
    while height > smallest and width > smallest and height % 2 == 0 and width % 2 == 0:
        levels, height, width = levels + 1, height // 2, width // 2
    return levels, height, width


def spatial_code_fits(image_shape: tuple[int, int, int], latent_dim: int) -> bool:
    """Whether a spatial code of ``latent_dim`` fits images of (C, H, W): they halve down to maps of
    :data:`SPATIAL_CODE_SIDE` and the code is whole channels of them (at 32x32 and 64x64, not at 48x48, which
    halves to 6x6)."""
    _, height, width = halvings(image_shape[1], image_shape[2], SPATIAL_CODE_SIDE)
    return min(height, width) == SPATIAL_CODE_SIDE and latent_dim % (height * width) == 0


class ConvAutoencoder(nn.Module):
    """A deterministic convolutional autoencoder, the Defuse authors' German-signs generator's design.

    Stride-2 4x4 convolutions of ``width`` channels halve the image until its side is at most 4 (or odd), then a
    linear layer gives a flat code; the decoder mirrors it. At 64x64 that is the authors' four convolutions of 64
    channels down to 4x4. It has no prior of its own: :class:`DensityAutoencoder` fits one on its codes.

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W), H and W divisible by 4.
    latent_dim : int
        Size of the code.
    width : int
        Channels of every convolution.
    code_log_variance : float
        What :meth:`encode` reports as the codes' log-variance: that of the noise added to codes in training
        (:func:`train_autoencoder`), the spread around a code that still decodes cleanly.
    spatial : bool
        Keep the code spatial: stop halving at a side of 8 and map the feature maps to ``latent_dim / 64``
        channels with a 1x1 convolution (a code of 256 is 4 x 8 x 8), flattened; each code dimension then
        describes one region of the image.
    """

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int, width: int = 64,
                 code_log_variance: float = -4.6, spatial: bool = False) -> None:
        super().__init__()
        channels, height, width_px = _check_shape(image_shape)
        self.image_shape = (channels, height, width_px)
        self.latent_dim = int(latent_dim)
        self.code_log_variance = float(code_log_variance)
        down, side_h, side_w = halvings(height, width_px, SPATIAL_CODE_SIDE if spatial else 4)
        self._base = (width, side_h, side_w)
        # the outermost level (the largest feature maps) gets half the channels where there are three levels or
        # more: at 64x64 it held most of the arithmetic
        widths = [width // 2 if level == 0 and down >= 3 else width for level in range(down)]
        encoder, decoder = [], []
        for level in range(down):
            encoder += [nn.Conv2d(channels if level == 0 else widths[level - 1], widths[level], 4, stride=2, padding=1),
                        nn.BatchNorm2d(widths[level]), nn.LeakyReLU(0.2)]
        for level in reversed(range(down)):
            out = channels if level == 0 else widths[level - 1]
            decoder += [nn.ConvTranspose2d(widths[level], out, 4, stride=2, padding=1)]
            if level:
                decoder += [nn.BatchNorm2d(out), nn.LeakyReLU(0.2)]
        flat = width * side_h * side_w
        if spatial:
            code_channels, remainder = divmod(self.latent_dim, side_h * side_w)
            if remainder or not code_channels:
                raise ProbeError(f"a spatial code of {side_h}x{side_w} needs a latent size that is a multiple of "
                                 f"{side_h * side_w}, got {self.latent_dim}")
            self.encoder = nn.Sequential(*encoder, nn.Conv2d(width, code_channels, 1), nn.Flatten())
            self.decoder_fc = nn.Sequential(nn.Unflatten(1, (code_channels, side_h, side_w)),
                                            nn.Conv2d(code_channels, width, 1), nn.LeakyReLU(0.2), nn.Flatten())
        else:
            self.encoder = nn.Sequential(*encoder, nn.Flatten(), nn.Linear(flat, self.latent_dim))
            self.decoder_fc = nn.Sequential(nn.Linear(self.latent_dim, flat), nn.LeakyReLU(0.2))
        self.decoder_conv = nn.Sequential(*decoder)

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(code, log-variance), each (B, latent_dim), for images (B, C, H, W) in [0, 1]."""
        code = self.encoder(images)
        return code, torch.full_like(code, self.code_log_variance)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) in [0, 1] for codes (B, latent_dim)."""
        return torch.sigmoid(self.decoder_conv(self.decoder_fc(z).view(-1, *self._base)))


class DensityAutoencoder(DensityGenerator):
    """The zoo's regularized autoencoder: a :class:`ConvAutoencoder` seen through a code density fitted on
    its training codes after training (Ghosh et al., ICLR 2020), so Bayes-TrEx has a prior to sample and Defuse
    perturbs the same whitened codes. Latents are whitened codes (see
    :class:`~probe_core.models.density.DensityGenerator`).

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W).
    latent_dim : int
        Size of the code.
    class_names : sequence of str
        The data's classes, each with its part of the density.
    """

    spatial = False

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int, class_names) -> None:
        super().__init__(ConvAutoencoder(image_shape, latent_dim, spatial=self.spatial), class_names=class_names)
        self.image_shape = tuple(int(v) for v in image_shape)

    def fit_prior(self, images: torch.Tensor, labels: torch.Tensor, seed: int = 0,
                  reporter: Reporter | None = None) -> "DensityAutoencoder":
        """Fit the code density on the training images (N, C, H, W) with labels (N,); returns self."""
        self.prior_figures_ = {"prior": type(self.density).__name__}
        return self.fit_density(images, labels)


class SpatialDensityAutoencoder(DensityAutoencoder):
    """A :class:`DensityAutoencoder` whose code is spatial (``ConvAutoencoder(spatial=True)``): at 64x64 a code of
    256 is 4 channels of 8 x 8."""

    spatial = True


# The share of the training images a flow prior is stopped on (held out of its fit, never the test split).
FLOW_HELD_OUT_SHARE = 0.1


def flow_fits(train_images: int, latent_dim: int) -> bool:
    """Whether a flow prior over codes of ``latent_dim`` can be fitted on ``train_images`` training images: two
    codes per dimension once :data:`FLOW_HELD_OUT_SHARE` is held out."""
    return train_images - max(1, round(FLOW_HELD_OUT_SHARE * train_images)) >= 2 * latent_dim


class FlowAutoencoder(NoiseFlowGenerator):
    """The zoo's regularized autoencoder seen through a normalizing flow over its codes (issue 99): latents are the
    flow's N(0, I) noise, so Bayes-TrEx's HMC runs on the papers' prior and chains walk between the training codes
    instead of staying by the one they start on (:mod:`probe_core.models.code_flow`).

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W).
    latent_dim : int
        Size of the code (and of the noise).
    class_names : sequence of str
        The data's classes.
    """

    spatial = False

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int, class_names) -> None:
        super().__init__(ConvAutoencoder(image_shape, latent_dim, spatial=self.spatial))
        self.image_shape = tuple(int(v) for v in image_shape)
        self.class_names = tuple(class_names)

    def fit_prior(self, images: torch.Tensor, labels: torch.Tensor, seed: int = 0,
                  reporter: Reporter | None = None) -> "FlowAutoencoder":
        """Fit the flow on the codes of the training images (N, C, H, W) but a seeded
        :data:`FLOW_HELD_OUT_SHARE`, stopped where those held-out codes score best; returns self. ``labels``
        (N,) are not used: the flow is one density over every class's codes."""
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed)).to(images.device)
        held_out = max(1, round(FLOW_HELD_OUT_SHARE * len(images)))
        self.fit(images[order[held_out:]], images[order[:held_out]], reporter=reporter, seed=seed)
        self.prior_figures_ = {"prior": "CodeFlow", **{f"flow_{name}": value
                                                      for name, value in self.flow_figures_.items()}}
        return self


class SpatialFlowAutoencoder(FlowAutoencoder):
    """A :class:`FlowAutoencoder` whose code is spatial (``ConvAutoencoder(spatial=True)``): at 32x32 and 64x64 a
    code of 512 is 8 channels of 8 x 8."""

    spatial = True


AUTOENCODER_ARCHITECTURES = {"DensityAutoencoder": DensityAutoencoder,
                             "SpatialDensityAutoencoder": SpatialDensityAutoencoder,
                             "FlowAutoencoder": FlowAutoencoder,
                             "SpatialFlowAutoencoder": SpatialFlowAutoencoder}


# The regularized autoencoder's loss (:func:`autoencoder_loss`): pixels + SSIM + features, an L2 penalty on codes
# and noise on them in training (Ghosh et al., ICLR 2020), so that codes near a training code decode cleanly.
AUTOENCODER_SSIM_WEIGHT = 1.0
AUTOENCODER_FEATURE_WEIGHT = 0.1
AUTOENCODER_CODE_PENALTY = 1e-3
AUTOENCODER_CODE_NOISE = 0.1


def autoencoder_loss(model: ConvAutoencoder, images: torch.Tensor, features: FeatureStages | None,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """A regularized autoencoder's training loss on a batch (B, C, H, W), and its parts as floats.

    Mean squared pixel error + :data:`AUTOENCODER_SSIM_WEIGHT` x (1 - SSIM) (``pytorch_msssim``, the Defuse
    authors' reconstruction loss) + :data:`AUTOENCODER_FEATURE_WEIGHT` x each feature stage's squared error
    relative to the stage's energy + :data:`AUTOENCODER_CODE_PENALTY` x the codes' mean square; codes are
    decoded with Gaussian noise of standard deviation :data:`AUTOENCODER_CODE_NOISE` added.
    """
    code, _ = model.encode(images)
    noise = torch.randn(code.shape, generator=generator).to(code) if generator is not None else torch.randn_like(code)
    reconstruction = model.decode(code + AUTOENCODER_CODE_NOISE * noise)
    pixels = (reconstruction - images).pow(2).mean()
    window = 11 if min(images.shape[-2:]) >= 16 else 3
    structure = 1.0 - ssim(reconstruction, images, data_range=1.0, size_average=True, win_size=window)
    loss = pixels + AUTOENCODER_SSIM_WEIGHT * structure + AUTOENCODER_CODE_PENALTY * code.pow(2).mean()
    feature_term = torch.zeros((), device=images.device)
    if features is not None:
        with torch.no_grad():
            targets = features(images)
        for produced, target in zip(features(reconstruction), targets):
            feature_term = feature_term + (produced - target).pow(2).mean() / target.pow(2).mean().clamp_min(1e-6)
        loss = loss + AUTOENCODER_FEATURE_WEIGHT * feature_term
    return loss, {"pixel_mse": pixels.item(), "ssim": 1.0 - structure.item(), "features": feature_term.item()}


@torch.no_grad()
def evaluate_autoencoder(model: nn.Module, images: torch.Tensor, batch_size: int = 512) -> dict:
    """Test reconstruction MSE per pixel and SSIM of a generator with ``encode``/``decode``, decoded at the mean."""
    model.eval()
    device = next(model.parameters()).device
    errors, similarities = [], []
    for start in range(0, len(images), batch_size):
        batch = images[start:start + batch_size].to(device)
        reconstruction = model.decode(model.encode(batch)[0])
        errors.append((reconstruction - batch).pow(2).flatten(1).mean(1))
        window = 11 if min(batch.shape[-2:]) >= 16 else 3
        similarities.append(ssim(reconstruction, batch, data_range=1.0, size_average=False, win_size=window))
    return {"test_reconstruction_mse": float(torch.cat(errors).mean()),
            "test_ssim": float(torch.cat(similarities).mean())}


def train_autoencoder(
    dataset: ImageDataset,
    *,
    latent_dim: int | None = None,
    epochs: int = 30,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    seed: int = 0,
    device: str | torch.device = "cpu",
    reporter: Reporter | None = None,
    perceptual: str | None = "trained",
    augment: bool = False,
    feature_epochs: int | None = None,
    architecture: str = "DensityAutoencoder",
    feature_network: ResNetClassifier | None = None,
) -> tuple[DensityAutoencoder, dict]:
    """Train the zoo's regularized autoencoder, then fit its code density on the training images.

    The autoencoder (:class:`ConvAutoencoder`) trains with :func:`autoencoder_loss`: ``perceptual`` chooses the
    feature network of its feature term as for VAEs (None: pixels and SSIM alone; "trained" is a ResNet trained on
    the data's labels first, never the probed classifier, or ``feature_network``, that network trained already).
    ``augment`` passes batches through
    :func:`augment_batch`. Afterwards the architecture's prior is fitted on the codes of the (unaugmented) training
    images (``fit_prior``): a :class:`FlowAutoencoder`'s flow, whose noise it samples and encodes in, or a
    :class:`DensityAutoencoder`'s :class:`~probe_core.models.density.KernelCodeDensity`, whose whitened
    coordinates it samples and encodes in. Metrics are :func:`evaluate_autoencoder` on the test split and the
    prior's figures (``prior``, and a flow's ``flow_steps``, ``flow_held_out_nll``...).
    """
    latent_dim = int(latent_dim or dataset.default_latent_dim)
    features, first = None, perceptual_epochs(perceptual, epochs, feature_epochs)
    if perceptual is not None:
        features = perceptual_network(dataset, perceptual, seed, device, epochs_of(reporter, "rae", 0, first + epochs),
                                      first, feature_network)
    reporter = epochs_of(reporter, "rae", first, first + epochs)
    with torch.random.fork_rng(devices=[]), denormals_flushed():
        torch.manual_seed(seed)
        model = AUTOENCODER_ARCHITECTURES[architecture](dataset.image_shape, latent_dim, dataset.class_names).to(device)
        network = model.generator
        shuffler = torch.Generator().manual_seed(seed)
        optimiser = adam(network.parameters(), learning_rate)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=max(epochs, 1))
        images = dataset.train_images
        for epoch in range(1, epochs + 1):
            network.train()
            total, count = 0.0, 0
            for index in _batches(len(images), batch_size, shuffler):
                batch = images[index].to(device)
                if augment:
                    batch = augment_batch(batch, shuffler)
                loss, _ = autoencoder_loss(network, batch, features, shuffler)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += loss.item() * len(index)
                count += len(index)
            schedule.step()
            report_epoch(reporter, "rae", epoch, epochs, total / count, "train_loss", total / count)
        model.eval()
        model.fit_prior(images.to(device), dataset.train_labels.to(device), seed=seed, reporter=reporter)
        metrics = {**evaluate_autoencoder(model, dataset.test_images), **model.prior_figures_}
    return model, metrics


