"""Model zoo architectures: a small CNN classifier, a VAE and a DCGAN-style GAN.

All are sized from the image shape (C, H, W); H and W must be multiples of 4
(8x8 digits, 28x28 MNIST, 32x32 and 48x48 scenes all are).

Conventions
-----------
- Classifiers return **logits** from ``forward``; :func:`probe_core.models.ProbabilityModel`
  wraps any classifier so that downstream code always sees probabilities.
- Generators share one interface: ``latent_dim``, ``decode(z) -> images`` with z of
  shape (B, latent_dim) and images (B, C, H, W) in [0, 1]; VAEs add
  ``encode(x) -> (mu, logvar)``.
"""

from __future__ import annotations

import torch
from torch import nn

from probe_core.errors import ProbeError


def _check_shape(image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    channels, height, width = (int(v) for v in image_shape)
    if height % 4 or width % 4:
        raise ProbeError(f"zoo models need image height and width divisible by 4, got {height}x{width}")
    return channels, height, width


def _widths(height: int) -> tuple[int, int, int]:
    """Conv widths and hidden size: small images get small nets (fast on 2 cores)."""
    return (16, 32, 128) if height <= 16 else (32, 64, 256)


class _BodyHeadClassifier(nn.Module):
    """A zoo classifier: ``body`` (images -> penultimate features) then a linear ``head`` (-> logits)."""

    output_kind = "logits"
    body: nn.Module
    head: nn.Linear

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate-layer features, shape (B, hidden)."""
        return self.body(images)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits of shape (B, K) for images of shape (B, C, H, W) in [0, 1]."""
        return self.head(self.features(images))


class ConvClassifier(_BodyHeadClassifier):
    """Two conv blocks (conv, ReLU, conv, ReLU, max-pool) and a two-layer head.

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W) of the inputs.
    num_classes : int
        K, the number of outputs.
    """

    def __init__(self, image_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        channels, height, width = _check_shape(image_shape)
        c1, c2, hidden = _widths(height)
        self.image_shape = (channels, height, width)
        self.num_classes = int(num_classes)
        self.body = nn.Sequential(
            nn.Conv2d(channels, c1, 3, padding=1), nn.ReLU(),
            nn.Conv2d(c1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(c2 * (height // 4) * (width // 4), hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, self.num_classes)


class CountingClassifier(_BodyHeadClassifier):
    """Conv features, per-location detectors and mean pooling: for "how many X are there" questions.

    Mean pooling over the image keeps a count (sum = mean · H · W) of whatever the detectors
    fire on, wherever the objects are, which a flatten or max pooling would have to learn.
    Batch normalisation makes it train in a few epochs; in eval mode it is a plain function.

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W) of the inputs.
    num_classes : int
        K, the number of outputs.
    """

    def __init__(self, image_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        channels, height, width = _check_shape(image_shape)
        self.image_shape = (channels, height, width)
        self.num_classes = int(num_classes)
        self.body = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 32, 1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(32, 64), nn.ReLU(),
        )
        self.head = nn.Linear(64, self.num_classes)


class _ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a shortcut (a projection where the shape changes)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(outputs), nn.ReLU(),
            nn.Conv2d(outputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs),
        )
        self.shortcut = (nn.Identity() if stride == 1 and inputs == outputs else
                         nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(outputs)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.main(x) + self.shortcut(x))


class ResNetClassifier(_BodyHeadClassifier):
    """A small residual network for real-size images (32x32 to 128x128, grey or colour): a ResNet-8.

    A stem (strided for images above 32x32, so every size costs about the same per image), three residual
    stages of widths 16, 32, 64 (the last two strided; CIFAR's ResNet widths) and global average pooling: the
    shape of the ResNets the Defuse paper finetunes, sized to train in minutes on 2 CPU cores (a training step
    of 64 images takes about 0.08 s there; widths 32, 64, 128 took 0.27 s). Weights and inputs are kept
    channels-last, which CPU convolutions run faster.

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W) of the inputs; H and W at least 16.
    num_classes : int
        K, the number of outputs.
    """

    def __init__(self, image_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        channels, height, width = _check_shape(image_shape)
        self.image_shape = (channels, height, width)
        self.num_classes = int(num_classes)
        stem_stride = max(1, min(height, width) // 32)
        self.body = nn.Sequential(
            nn.Conv2d(channels, 16, 3, stride=stem_stride, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            _ResidualBlock(16, 16, 1), _ResidualBlock(16, 32, 2), _ResidualBlock(32, 64, 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(64, self.num_classes)
        self.to(memory_format=torch.channels_last)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate-layer features, shape (B, 64)."""
        return self.body(images.contiguous(memory_format=torch.channels_last))


CLASSIFIER_ARCHITECTURES = {"ConvClassifier": ConvClassifier, "CountingClassifier": CountingClassifier,
                            "ResNetClassifier": ResNetClassifier}


class VAE(nn.Module):
    """Convolutional VAE with a unit-Gaussian prior and a Bernoulli decoder.

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W).
    latent_dim : int
        Size of z.
    """

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int) -> None:
        super().__init__()
        channels, height, width = _check_shape(image_shape)
        c1, c2, hidden = _widths(height)
        self.image_shape = (channels, height, width)
        self.latent_dim = int(latent_dim)
        self._base = (c2, height // 4, width // 4)
        flat = c2 * (height // 4) * (width // 4)
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, c1, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(c1, c2, 4, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(),
        )
        self.to_mu = nn.Linear(hidden, self.latent_dim)
        self.to_logvar = nn.Linear(hidden, self.latent_dim)
        self.decoder_fc = nn.Sequential(
            nn.Linear(self.latent_dim, hidden), nn.ReLU(), nn.Linear(hidden, flat), nn.ReLU()
        )
        self.decoder_conv = nn.Sequential(
            nn.ConvTranspose2d(c2, c1, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(c1, channels, 4, stride=2, padding=1),
        )

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu, logvar) of q(z | x), each of shape (B, latent_dim)."""
        hidden = self.encoder(images)
        return self.to_mu(hidden), self.to_logvar(hidden).clamp(-12.0, 8.0)

    def decode_logits(self, z: torch.Tensor) -> torch.Tensor:
        """Bernoulli logits of shape (B, C, H, W) for z of shape (B, latent_dim)."""
        return self.decoder_conv(self.decoder_fc(z).view(-1, *self._base))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images of shape (B, C, H, W) in [0, 1] (the Bernoulli means)."""
        return torch.sigmoid(self.decode_logits(z))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reparameterised pass: (reconstruction logits, mu, logvar)."""
        mu, logvar = self.encode(images)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode_logits(z), mu, logvar


class MLPVAE(VAE):
    """Fully connected VAE for small images (up to 16x16), same interface as :class:`VAE`.

    On 8x8 digits (400 epochs) it beats the convolutional VAE on sample quality (FD-clf 11
    vs 24) and on how many ambiguous class pairs Bayes-TrEx can reach (37 vs 29 of 45).
    """

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int, hidden: int = 512) -> None:
        nn.Module.__init__(self)
        channels, height, width = (int(v) for v in image_shape)
        self.image_shape = (channels, height, width)
        self.latent_dim = int(latent_dim)
        pixels = channels * height * width
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(pixels, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.to_mu = nn.Linear(hidden, self.latent_dim)
        self.to_logvar = nn.Linear(hidden, self.latent_dim)
        self.decoder = nn.Sequential(
            nn.Linear(self.latent_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, pixels)
        )

    def decode_logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z).view(-1, *self.image_shape)


VAE_ARCHITECTURES = {"MLPVAE": MLPVAE, "VAE": VAE}


def default_vae_architecture(image_shape: tuple[int, int, int]) -> str:
    """The zoo VAE for an image size: ``MLPVAE`` up to 16x16, the convolutional ``VAE`` above."""
    return "MLPVAE" if image_shape[1] <= 16 else "VAE"


def make_vae(image_shape: tuple[int, int, int], latent_dim: int, architecture: str | None = None) -> VAE:
    """Build a zoo VAE by architecture name (default: :func:`default_vae_architecture`)."""
    name = architecture or default_vae_architecture(image_shape)
    if name not in VAE_ARCHITECTURES:
        raise ValueError(f"unknown VAE architecture {name!r}; use one of {', '.join(VAE_ARCHITECTURES)}")
    return VAE_ARCHITECTURES[name](image_shape, latent_dim)


class GANGenerator(nn.Module):
    """DCGAN-style generator: linear to (2c, H/4, W/4), two transposed convs, sigmoid.

    Parameters
    ----------
    image_shape : tuple of int
        (C, H, W).
    latent_dim : int
        Size of z ~ N(0, I).
    """

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int) -> None:
        super().__init__()
        channels, height, width = _check_shape(image_shape)
        c1, c2, _ = _widths(height)
        self.image_shape = (channels, height, width)
        self.latent_dim = int(latent_dim)
        self._base = (2 * c2, height // 4, width // 4)
        self.project = nn.Sequential(
            nn.Linear(self.latent_dim, 2 * c2 * (height // 4) * (width // 4)),
            nn.BatchNorm1d(2 * c2 * (height // 4) * (width // 4)), nn.ReLU(),
        )
        self.upsample = nn.Sequential(
            nn.ConvTranspose2d(2 * c2, c2, 4, stride=2, padding=1), nn.BatchNorm2d(c2), nn.ReLU(),
            nn.ConvTranspose2d(c2, channels, 4, stride=2, padding=1),
        )

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images of shape (B, C, H, W) in [0, 1] for z of shape (B, latent_dim)."""
        return torch.sigmoid(self.upsample(self.project(z).view(-1, *self._base)))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.decode(z)


class GANDiscriminator(nn.Module):
    """DCGAN-style discriminator: two strided convs with LeakyReLU, one logit."""

    def __init__(self, image_shape: tuple[int, int, int]) -> None:
        super().__init__()
        channels, height, width = _check_shape(image_shape)
        c1, c2, _ = _widths(height)
        self.net = nn.Sequential(
            nn.Conv2d(channels, c1, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(c1, c2, 4, stride=2, padding=1), nn.BatchNorm2d(c2), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(c2 * (height // 4) * (width // 4), 1),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Real/fake logits of shape (B,)."""
        return self.net(images).squeeze(1)


class ProbabilityModel(nn.Module):
    """Wraps a classifier so that ``forward`` returns probabilities.

    Parameters
    ----------
    net : nn.Module
        Maps images (B, C, H, W) in [0, 1] to (B, K) logits or probabilities.
    output_kind : {"logits", "probabilities"}
        What ``net`` returns.
    """

    def __init__(self, net: nn.Module, output_kind: str = "logits") -> None:
        super().__init__()
        if output_kind not in ("logits", "probabilities"):
            raise ProbeError(f"output_kind must be 'logits' or 'probabilities', got {output_kind!r}")
        self.net = net
        self.output_kind = output_kind

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class probabilities of shape (B, K)."""
        out = self.net(images)
        return torch.softmax(out, dim=-1) if self.output_kind == "logits" else out

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate features if the wrapped net has them, else its raw outputs."""
        feature_fn = getattr(self.net, "features", None)
        return feature_fn(images) if callable(feature_fn) else self.net(images)
