"""The scene world: procedural scenes, a non-differentiable renderer, and object-removal counterfactuals.

Bayes-TrEx's CLEVR study (Sec. 4.2, 4.6, 4.7) on a CPU: a classifier answers "how many squares
are there?" about rendered scenes, and random-walk Metropolis samples scene descriptions.

- :mod:`~probe_core.scenes.world`: scene vectors, :class:`ScenePrior`, :class:`SceneProposal`.
- :mod:`~probe_core.scenes.render`: :func:`render_scenes` (numpy, deterministic).
- :mod:`~probe_core.scenes.generator`: the renderer as a generator module for the samplers (it
  satisfies :class:`~probe_core.sampling.protocols.StructuredPrior`) and the scene data sets.
- :mod:`~probe_core.scenes.counterfactual`: remove each object, re-render, see the confidence drop.
- :mod:`~probe_core.scenes.catalog`: what the scene world adds to :mod:`probe_core.catalog`: its
  data sets (with their capabilities) and the ``scene:`` generator source.

The ``probe scenes`` commands are in :mod:`probe_core.cli.scenes`.
"""

from probe_core.scenes.render import render_scenes
from probe_core.scenes.world import SHAPES, ScenePrior, SceneProposal, describe, describe_text

__all__ = ["SHAPES", "ScenePrior", "SceneProposal", "describe", "describe_text", "render_scenes"]
