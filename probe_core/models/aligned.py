"""A classifier whose outputs follow a data set's class order (classes matched by name)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from probe_core.models.architectures import ProbabilityModel


class AlignedClassifier(ProbabilityModel):
    """A :class:`ProbabilityModel` whose K' outputs are chosen columns of ``net``'s, in a data set's class order.

    Parameters
    ----------
    net : nn.Module
        Maps images (B, C, H, W) in [0, 1] to (B, K) logits or probabilities.
    output_kind : {"logits", "probabilities"}
    output_order : sequence of int
        ``net``'s column for each output (:attr:`probe_core.data.classes.ClassMatch.output_order`). It is
        not part of the state dict: ``net``'s weights save and load as they are.
    """

    def __init__(self, net: nn.Module, output_kind: str, output_order: Sequence[int]) -> None:
        super().__init__(net, output_kind)
        self.output_order = tuple(int(i) for i in output_order)

    def scores(self, images: torch.Tensor) -> torch.Tensor:
        """``net``'s raw outputs (logits or probabilities) in this model's order: (B, K')."""
        out = self.net(images)
        return out[:, torch.as_tensor(self.output_order, device=out.device)]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class probabilities (B, K') in the data set's order."""
        out = self.scores(images)
        if self.output_kind == "logits":
            return torch.softmax(out, dim=-1)
        return out / out.sum(-1, keepdim=True).clamp_min(1e-12)
