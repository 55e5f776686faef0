"""The notebook API (``import probe_core as mp``) on the trained digits models."""

import pytest
import torch

import probe_core as mp
from probe_core.classes import ClassMismatchError
from probe_core.errors import ProbeError


class _Reversed(torch.nn.Module):
    def forward(self, x):
        return x.flip(1)


def test_check_takes_references_and_in_memory_modules_with_their_class_names(trained_workspace):
    checked = mp.check("default", "digits", generator="default", workspace=trained_workspace)
    assert checked.usable and checked.classifier.accuracy > 0.9 and checked.generator.verdict == "ok"
    assert len(checked.to_pandas()) == 10 and "accuracy" in checked.summary()
    default = trained_workspace.registry.resolve("default", "classifier", "digits")
    reversed_net = torch.nn.Sequential(default.module.net, _Reversed())  # logits in the order 9, 8, ..., 0
    by_name = mp.check(reversed_net, "digits", class_names=[str(k) for k in range(9, -1, -1)], input_shape=(1, 8, 8),
                       workspace=trained_workspace)
    assert by_name.usable and abs(by_name.classifier.accuracy - checked.classifier.accuracy) < 1e-9
    with pytest.raises(ClassMismatchError, match="class 0"):
        mp.check(reversed_net, "digits", class_names=[f"class {k}" for k in range(10)], workspace=trained_workspace)


def test_the_defuse_verbs_find_label_fix_and_keep_a_planted_flaw(trained_workspace, flawed_run):
    """identify -> distill -> label (an oracle stands in for people) -> correct -> a suite, as the notebook does."""
    from helpers import MISLABELLED

    space = trained_workspace
    found = mp.defuse.identify(flawed_run["classifier"], MISLABELLED, workspace=space, samples_per_image=60,
                               max_images=400, progress=False)
    assert len(found.failures.latents) > 0 and len(found.to_pandas()) == len(found.failures.latents)
    clusters = mp.defuse.distill(found, workspace=space, max_samples=1000, progress=False)
    assert clusters.report["clusters"] and "clusters" in clusters.summary()
    labelled = mp.defuse.label(clusters, oracle="default", workspace=space)
    assert labelled.source.startswith("oracle:") and any(c["is_failure"] for c in labelled.report["clusters"])
    fixed = mp.defuse.correct(labelled, workspace=space, lambdas=(1.0,), epochs=1, samples_per_region=64,
                              progress=False)
    assert fixed.corrected_model and {"before", "defuse", "baseline"} <= set(fixed.report["results"])
    assert len(fixed.to_pandas()) == 3
    kept = mp.suite("api-regressions", fixed.corrected_model, regions_of=labelled, workspace=space)
    assert kept.score["checks"] and len(kept.to_pandas()) == len(kept.score["checks"])
    again = mp.suite("api-regressions", flawed_run["classifier"], regions_of=labelled, workspace=space)
    assert len(again.score["checks"]) == len(kept.score["checks"])  # a region is added once
    with pytest.raises(ProbeError, match="either labels"):
        mp.defuse.label(clusters, workspace=space)
