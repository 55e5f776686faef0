"""What the benchmarks' quick modes share: 1-epoch generators, trained once per workspace.

A quick mode proves its script's code path, not a figure (``make bench-quick``). The scripts that need a
generator take the one of the data set's default kind trained for :data:`QUICK_EPOCHS` epoch, the same model
``zoo_budgets.py --quick`` trains, instead of training the data set's defaults for their full epochs (15 on
MNIST: over a minute each on 2 cores).
"""

from __future__ import annotations

from probe_core.models import ModelSpec

QUICK_EPOCHS = 1
QUICK_SEED = 0


def quick_generator_spec(dataset: str, kind: str) -> ModelSpec:
    """The quick modes' generator of ``kind`` (``vae`` or ``gan``) on ``dataset``."""
    return ModelSpec(dataset=dataset, kind=kind, epochs=QUICK_EPOCHS, seed=QUICK_SEED,
                     beta=1.0 if kind == "vae" else None)


def quick_models(registry, dataset: str) -> tuple[str, str]:
    """The data set's default classifier and the quick generator of its default kind, trained if missing.

    Returns
    -------
    tuple of str
        The classifier's and the generator's model ids.
    """
    classifier = registry.get_or_train(registry.default_spec(dataset, "classifier", seed=QUICK_SEED))
    kind = registry.default_spec(dataset, "generator").kind
    generator = registry.get_or_train(quick_generator_spec(dataset, kind))
    return classifier.id, generator.id
