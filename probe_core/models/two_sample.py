"""A classifier two-sample test (Lopez-Paz and Oquab, ICLR 2017): can a small network tell generated images from
real ones?

A network is trained to tell half of the generated images from half of the real ones and scored on the other
halves: 50 % is indistinguishable, 100 % means every generated image gives itself away (a decoder's smoothing, a
colour cast). It sits beside the judge's agreement (is it the class?) and the provenance figures (is it new?):
together they say whether hits are images of the data (issue 99).
"""

from __future__ import annotations

import torch
from torch import nn

from probe_core.errors import ProbeError

TWO_SAMPLE_EPOCHS = 30
TWO_SAMPLE_BATCH = 64
MIN_TWO_SAMPLE_IMAGES = 10


class _TwoSampleNetwork(nn.Module):
    """Two convolutions, a global average and a logit: small enough to train in seconds, deep enough to see blur."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(32, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images).squeeze(1)


def two_sample_accuracy(generated: torch.Tensor, real: torch.Tensor, seed: int = 0,
                        epochs: int = TWO_SAMPLE_EPOCHS) -> dict:
    """How well a small network tells ``generated`` images from ``real`` ones on images it did not train on.

    Parameters
    ----------
    generated, real : torch.Tensor
        Images (N, C, H, W) and (M, C, H, W) in [0, 1]. The larger set is subsampled (seeded) to the smaller's
        size, so chance is 50 %.
    seed : int
        Chooses the subsample, the halves and the network's start.
    epochs : int
        Passes of Adam over the training halves.

    Returns
    -------
    dict
        ``accuracy`` on the held-out halves (0.5: indistinguishable) and ``images`` (per side, both halves).

    Raises
    ------
    ProbeError
        For images of different shapes or fewer than :data:`MIN_TWO_SAMPLE_IMAGES` on a side.
    """
    generated, real = torch.as_tensor(generated).float(), torch.as_tensor(real).float()
    if generated.ndim != 4 or generated.shape[1:] != real.shape[1:]:
        raise ProbeError(f"a two-sample test compares images of one shape (N, C, H, W), got "
                         f"{tuple(generated.shape)} and {tuple(real.shape)}")
    count = min(len(generated), len(real))
    if count < MIN_TWO_SAMPLE_IMAGES:
        raise ProbeError(f"a two-sample test needs at least {MIN_TWO_SAMPLE_IMAGES} images on each side, got "
                         f"{len(generated)} generated and {len(real)} real")
    rng = torch.Generator().manual_seed(seed)
    generated = generated[torch.randperm(len(generated), generator=rng)[:count]]
    real = real[torch.randperm(len(real), generator=rng)[:count]]
    half = count // 2
    train_images = torch.cat([generated[:half], real[:half]])
    train_labels = torch.cat([torch.ones(half), torch.zeros(half)])
    test_images = torch.cat([generated[half:], real[half:]])
    test_labels = torch.cat([torch.ones(count - half), torch.zeros(count - half)])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        network = _TwoSampleNetwork(generated.shape[1])
        optimiser = torch.optim.Adam(network.parameters(), lr=3e-3)
        loss_of = nn.BCEWithLogitsLoss()
        for _ in range(epochs):
            order = torch.randperm(len(train_images), generator=rng)
            for start in range(0, len(order), TWO_SAMPLE_BATCH):
                rows = order[start:start + TWO_SAMPLE_BATCH]
                loss = loss_of(network(train_images[rows]), train_labels[rows])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        with torch.no_grad():
            said = torch.cat([network(test_images[s:s + 512]) for s in range(0, len(test_images), 512)]) > 0
    return {"accuracy": float((said == test_labels.bool()).float().mean()), "images": count}
