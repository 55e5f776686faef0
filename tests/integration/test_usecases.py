"""The Bayes-TrEx use cases on digits, with the real default models (short runs)."""

from collections import Counter

import pytest

from probe_core.bayestrex import recipes as usecases
from probe_core.errors import ProbeError
from probe_core.runs.runconfig import config_of

pytestmark = pytest.mark.slow  # trains models or runs long steps: left out of make test-fast

SHORT = {"chains": 8, "warmup": 60, "samples": 40}


def test_a_given_generator_is_honoured_and_one_that_saw_the_class_refused(trained_workspace):
    registry = trained_workspace.registry
    vae_plan = usecases.plan_use_case(registry, "digits", "misclassification", excluded_class="5", generator="vae")
    assert vae_plan.generator.kind == "vae" and vae_plan.generator.classes == (0, 1, 2, 3, 4, 6, 7, 8, 9)
    with pytest.raises(ProbeError, match="trained on classes this use case must keep from it"):
        usecases.plan_use_case(registry, "digits", "misclassification", excluded_class="5",
                               generator=registry.default_id("digits", "gan"))
    with pytest.raises(ProbeError, match="must keep from it"):  # the data set's default saw every class
        usecases.plan_use_case(registry, "digits", "novel-class", generator="default")
    with pytest.raises(ProbeError, match="unknown use case"):
        usecases.plan_use_case(registry, "digits", "overconfidence")


def test_always_ambiguous_classifier_is_ambiguous_on_every_neighbouring_pair(trained_workspace):
    result = usecases.always_ambiguous(trained_workspace.registry, "digits", chains=4, warmup=40, samples=20)
    classifier = trained_workspace.registry.load(result.classifier)
    assert classifier.record["spec"]["ambiguous"] is True
    assert trained_workspace.registry.load(result.generator).record["spec"]["kind"] == "gan"
    pairs = [tuple(sorted(t["classes"])) for t in result.targets]
    assert pairs == [tuple(sorted((i, (i + 1) % 10))) for i in range(10)]
    # the paper: sampling succeeds for (nearly) every pair with such a classifier, even on the GAN
    assert result.reached >= 8


def test_novel_class_extrapolation_trains_on_disjoint_classes(trained_workspace):
    result = usecases.novel_class_extrapolation(trained_workspace.registry, "digits", (0, 1, 3, 6, 9), **SHORT)
    assert trained_workspace.registry.load(result.generator).record["spec"]["kind"] == "gan"
    assert result.use_case["generator_classes"] == ["2", "4", "5", "7", "8"]
    # one high-confidence target per class the classifier knows, written in its class names, indices stored
    assert [t["spec"] for t in result.targets] == [f"high:{name}" for name in ("0", "1", "3", "6", "9")]
    assert [t["classes"] for t in result.targets] == [[k] for k in range(5)]
    classifier = trained_workspace.registry.load(result.classifier)
    assert classifier.class_names == ("0", "1", "3", "6", "9")
    # At least one seen class is reached confidently from images of unseen classes.
    assert result.reached >= 1


def test_compare_two_classifiers_with_human_labels(trained_workspace):
    from probe_core.models import ModelSpec

    registry, store = trained_workspace.registry, trained_workspace.store
    other = registry.get_or_train(ModelSpec(dataset="digits", kind="classifier", epochs=2, seed=7))
    run_id = usecases.compare_classifiers(registry, store, "digits", "default", other.id, chains=2, warmup=20,
                                          samples=20, keep_every=5)
    to_label = usecases.samples_to_label(store, run_id, per_class=2)
    # two per target, or one where a target kept a single hit (seed and CPU decide): never an exact total
    per_target = Counter(s["target_index"] for s in to_label)
    assert set(per_target) == set(range(2 * 10)) and all(1 <= n <= 2 for n in per_target.values())
    per_side = [sum(n for t, n in per_target.items() if t // 10 == side) for side in (0, 1)]
    # An annotator who says every sample of classifier A shows its class and every sample of B shows "0".
    for s in to_label:
        side, c = divmod(s["target_index"], 10)
        store.set_label("ana", sample_id=s["id"], label=str(c) if side == 0 else "0")
    table = usecases.comparison_table(store, run_id)
    first, second = (table[k] for k in config_of(store.get_run(run_id)).classifiers)
    assert first["overall"] == 1.0 and first["labelled"] == per_side[0]
    assert second["overall"] == pytest.approx(per_target[10] / per_side[1])
    assert second["per_class"]["0"] == (1.0, per_target[10])
    # Compare's labelled confident samples become regression checks, one per classifier they were found on
    from probe_core import suites

    checks = [store.get_suite_check(i) for i in suites.add_finding_checks(registry, store, "compare-suite", run_id)]
    assert [c["found_on"] for c in checks] == list(config_of(store.get_run(run_id)).classifiers)
    assert [len(c["data"]["labels"]) for c in checks] == per_side
    assert set(suites.label_names(checks[1])) == {"0"}
