"""Helpers shared by the tests: tiny plugin models that need no training."""

from __future__ import annotations

import textwrap
from pathlib import Path

TINY_PLUGIN = '''
import torch
from torch import nn

class_names = [str(i) for i in range(10)]
input_shape = (1, 8, 8)
classifier_outputs = "logits"


class TinyGenerator(nn.Module):
    """Latent (B, 2) -> images (B, 1, 8, 8) in [0, 1]; deterministic weights."""

    latent_dim = 2

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(2, 64)

    def decode(self, z):
        return torch.sigmoid(self.fc(z)).view(-1, 1, 8, 8)

    def encode(self, x):
        flat = x.reshape(len(x), -1)
        mu = flat[:, :2] * 2 - 1
        return mu, torch.full_like(mu, -2.0)


def classifier():
    torch.manual_seed(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def generator():
    return TinyGenerator()
'''


def write_tiny_plugin(folder: Path, name: str = "tiny_model.py", extra: str = "") -> Path:
    """Write a plugin with an untrained 8x8 classifier (logits) and a 2-d generator; returns its path."""
    path = Path(folder) / name
    path.write_text(TINY_PLUGIN + textwrap.dedent(extra))
    return path
