"""The notebook API (``import probe_core as mp``) on the trained digits models."""

import pytest
import torch

import probe_core as mp
from probe_core.data.classes import ClassMismatchError
from probe_core.errors import ProbeError


class _Reversed(torch.nn.Module):
    def forward(self, x):
        return x.flip(1)


def test_check_takes_references_and_in_memory_modules_with_their_class_names(trained_workspace):
    checked = mp.check("default", "digits", generator="default", workspace=trained_workspace)
    assert checked.usable and checked.classifier.accuracy > 0.9 and checked.generator.verdict == "ok"
    assert len(checked.to_pandas()) == 10 and "accuracy" in checked.summary() and len(checked.plot().data[0].y) == 10
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
    assert found.plot().data[0].z.sum() == len(found.failures.latents)  # the confusion counts every failure
    clusters = mp.defuse.distill(found, workspace=space, max_samples=1000, progress=False)
    assert clusters.report["clusters"] and "clusters" in clusters.summary()
    labelled = mp.defuse.label(clusters, oracle="default", workspace=space)
    assert labelled.plot() is not None  # the Label page's agreement chart
    assert labelled.source.startswith("oracle:") and any(c["is_failure"] for c in labelled.report["clusters"])
    fixed = mp.defuse.correct(labelled, workspace=space, lambdas=(1.0,), epochs=1, samples_per_region=64,
                              progress=False)
    assert fixed.corrected_model and {"before", "defuse", "baseline"} <= set(fixed.report["results"])
    # the planted 9 -> 8 flaw was among the labelled failure regions, and the fix is measured on held-out samples
    assert any(c["is_failure"] and c["label"] == "9" for c in labelled.report["clusters"])
    before, after = fixed.report["results"]["before"], fixed.report["results"]["defuse"]
    assert after["failure_accuracy"] > before["failure_accuracy"] + 0.2
    assert after["test_accuracy"] >= before["test_accuracy"] - 0.02
    assert len(fixed.to_pandas()) == 3 and len(fixed.plot().data) == 4  # the Finetune page's trade-off
    kept = mp.suite("api-regressions", fixed.corrected_model, regions_of=labelled, workspace=space)
    assert kept.score.checks and len(kept.to_pandas()) == len(kept.score.checks)
    assert len(kept.plot().data[0].x) == len(kept.score.checks)
    again = mp.suite("api-regressions", flawed_run["classifier"], regions_of=labelled, workspace=space)
    assert len(again.score.checks) == len(kept.score.checks)  # a region is added once
    net = trained_workspace.registry.resolve(flawed_run["classifier"], "classifier", MISLABELLED).module.net
    in_memory = mp.suite("api-regressions", net, class_names=[str(k) for k in range(10)], workspace=space)
    assert in_memory.score.classifier.startswith("modelfile:") and [
        round(c["accuracy"], 6) for c in in_memory.score.checks] == [round(c["accuracy"], 6) for c in again.score.checks]
    with pytest.raises(ProbeError, match="either labels"):
        mp.defuse.label(clusters, workspace=space)


class _FirstLogits(torch.nn.Module):
    """A classifier of the first ``count`` classes only: the first ``count`` logits of a 10-class net."""

    def __init__(self, net: torch.nn.Module, count: int) -> None:
        super().__init__()
        self.net, self.count = net, count

    def forward(self, x):
        return self.net(x)[:, :self.count]


def test_in_memory_models_and_arrays_are_kept_as_files_that_resolve_in_another_process(trained_workspace, tmp_path):
    """mp.sample and mp.matrix on modules and (x, y) arrays in a new workspace: nothing trained, all stored."""
    import plotly.graph_objects as go
    from helpers import resolve_elsewhere

    from probe_core.catalog import load_dataset
    from probe_core.models.kept import keep_classifier, keep_generator

    digits = load_dataset("digits")
    three = digits.train_labels < 3  # a three-class problem, so the matrix has three pairs
    x, y = digits.train_images[three], digits.train_labels[three]
    classifier = _FirstLogits(trained_workspace.registry.resolve("default", "classifier", "digits").module.net, 3)
    vae = trained_workspace.registry.resolve("default", "generator", "digits").module
    names = ["0", "1", "2"]
    space = tmp_path / "notebook-workspace"
    small = dict(chains=4, warmup=20, samples=20, workspace=space, progress=False)

    sampled = mp.sample("ambiguous:1,2", classifier, vae, dataset=(x, y), class_names=names, **small)
    assert sampled.request.classifier.startswith("modelfile:") and sampled.request.dataset.startswith("arrays:")
    assert sampled.confidences.shape[1] == 3 and len(sampled.to_pandas()) == len(sampled.z)
    figure = sampled.plot()
    assert isinstance(figure, go.Figure) and {trace.name for trace in figure.data} == {"p(1)", "p(2)"}
    references = {"dataset": sampled.request.dataset, "classifier": sampled.request.classifier,
                  "generator": sampled.request.generator}
    assert resolve_elsewhere(space, references).split() == ["3", references["classifier"], references["generator"]]
    # the same objects again: the same files, nothing new written
    assert keep_classifier(space, classifier, names, (1, 8, 8)) == references["classifier"]
    assert keep_generator(space, vae) == references["generator"]

    matrix = mp.matrix(classifier, vae, dataset=(x, y), class_names=names, **small)
    assert matrix.reached.shape == (3, 3) and (matrix.reached == matrix.reached.T).all()
    assert not matrix.reached.diagonal().any() and matrix.images.shape == (3, 3, 1, 8, 8)
    assert len(matrix.to_pandas()) == 3 and len(matrix.plot().data) == 2

    with pytest.raises(ProbeError, match="class_names"):
        mp.sample("high:1", classifier, vae, dataset=(x, y), **small)
    with pytest.raises(ProbeError, match="distinct class names"):
        keep_classifier(space, classifier, ["0", "0", "1"], (1, 8, 8))
    with pytest.raises(ProbeError, match="pair \\(x, y\\)"):
        mp.sample("high:1", classifier, vae, dataset=[x], class_names=names, **small)
