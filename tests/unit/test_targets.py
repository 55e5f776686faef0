import math

import pytest
import torch

from probe_core.errors import ProbeError
from probe_core.sampling.targets import TargetBatch, TargetSpec, parse_targets

NAMES = tuple(str(i) for i in range(4))
FASHION = ("T-shirt/top", "Trouser", "Bag")


def normal_logpdf(x, mean, sigma):
    return -0.5 * ((x - mean) / sigma) ** 2 - math.log(sigma * math.sqrt(2 * math.pi))


def test_likelihoods_match_the_paper_on_hand_values():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    sigma = 0.05
    [high] = parse_targets("high:1", NAMES)
    assert high.log_likelihood(probs, sigma).item() == pytest.approx(normal_logpdf(1.0, 0.3, sigma), rel=1e-5)
    [ambiguous] = parse_targets("ambiguous:0,1", NAMES)
    # u1 = |0.5 - 0.3| = 0.2 -> 0; u2 = min(0.5, 0.3) - max(0.15, 0.05) = 0.15 -> 0.5
    expected = normal_logpdf(0.0, 0.2, sigma) + normal_logpdf(0.5, 0.15, sigma)
    assert ambiguous.log_likelihood(probs, sigma).item() == pytest.approx(expected, rel=1e-5)
    [uniform] = parse_targets("uniform", NAMES)
    assert uniform.log_likelihood(probs, sigma).item() == pytest.approx(normal_logpdf(0.0, 0.45, sigma), rel=1e-5)
    [vector] = parse_targets("probs:0=0.7,1=0.3", NAMES)
    expected = sum(normal_logpdf(t, p, sigma) for t, p in zip([0.7, 0.3, 0, 0], [0.5, 0.3, 0.15, 0.05]))
    assert vector.log_likelihood(probs, sigma).item() == pytest.approx(expected, rel=1e-5)


def test_batch_matches_single_targets_and_hits():
    targets = parse_targets("ambiguous:0,1;high:2;probs:3=1", NAMES)
    batch = TargetBatch(targets, 2)
    probs = torch.tensor([[0.45, 0.45, 0.05, 0.05], [0.5, 0.1, 0.3, 0.1],
                          [0.0, 0.05, 0.95, 0.0], [0.2, 0.2, 0.4, 0.2],
                          [0.0, 0.0, 0.05, 0.95], [0.3, 0.3, 0.2, 0.2]])
    expected = torch.cat([t.log_likelihood(probs[2 * i:2 * i + 2]) for i, t in enumerate(targets)])
    assert torch.allclose(batch.log_likelihood(probs), expected)
    assert batch.is_hit(probs).tolist() == [True, False, True, False, True, False]
    assert batch.is_hit(probs.unsqueeze(1).repeat(1, 3, 1)).shape == (6, 3)


def test_ambiguous_hit_requires_no_other_class_above():
    [target] = parse_targets("ambiguous:0,1", NAMES)
    assert target.is_hit(torch.tensor([[0.42, 0.42, 0.16, 0.0]])).item()
    assert not target.is_hit(torch.tensor([[0.3, 0.3, 0.4, 0.0]])).item()
    assert not target.is_hit(torch.tensor([[0.65, 0.35, 0.0, 0.0]])).item()


def test_spec_language():
    assert [t.spec for t in parse_targets("path:0->3:5", NAMES)] == [
        "probs:0=1", "probs:0=0.75,3=0.25", "probs:0=0.5,3=0.5", "probs:0=0.25,3=0.75", "probs:3=1"]
    assert len(parse_targets("ambiguous-matrix", tuple(str(i) for i in range(10)))) == 45
    assert parse_targets("high:bag", FASHION)[0].classes == (2,)
    # canonical text is written in the classifier's class names (high:seven shows as high:seven), sorted by index
    [pair] = parse_targets("ambiguous:Trouser,T-shirt/top", FASHION)
    assert pair.spec == "ambiguous:T-shirt/top,Trouser" and pair.classes == (0, 1)
    assert parse_targets(pair.spec, FASHION)[0].classes == (0, 1)  # and reads back as the same classes
    assert parse_targets("high:1", ("zero", "one"))[0].spec == "high:one"
    assert parse_targets("probs:0=0.5,1=0.5", ("a:b", "c"))[0].spec == "probs:0=0.5,c=0.5"  # ':' in a name: index
    assert parse_targets("high:1", ("3", "1"))[0].spec == "high:1" and \
        parse_targets("high:1", ("3", "1"))[0].classes == (1,)
    assert parse_targets("uniform", NAMES)[0].target_probs == (0.25,) * 4


@pytest.mark.parametrize("spec, message", [
    ("high:9", "unknown class '9'"),
    ("high:", "unknown class"),
    ("ambiguous:1", "two classes"),
    ("ambiguous:2,2", "must differ"),
    ("probs:0=0.7,1=0.4", "sum to 1"),
    ("probs:0=-0.5,1=1.5", "non-negative"),
    ("probs:0=abc", "not a number"),
    ("probs:0", "CLASS=PROBABILITY"),
    ("path:0-1:3", "path:A->B:STEPS"),
    ("path:0->1:1", "a whole number from 2 to 101"),
    ("path:0->1:102", "a whole number from 2 to 101"),
    ("path:0->1:x", "the number of steps must be a whole number from 2 to 101"),
    ("path:2->2:3", "two different classes"),
    ("probs:", "write probs:8=0.7,9=0.3"),
    ("probs:0=inf", "non-negative, got 'inf'"),
    ("probs:0=x", "'x' is not a number"),
    ("probs:zero", "'zero' is not CLASS=PROBABILITY"),
    ("uniform:3", "uniform takes no argument"),
    ("ambiguous-matrix:3", "ambiguous-matrix takes no argument"),
    ("sideways:1", "unknown target kind"),
    ("", "unknown target kind"),
])
def test_bad_specs_raise_one_clear_error(spec, message):
    with pytest.raises(ProbeError, match=message):
        parse_targets(spec, NAMES)


def test_misclassification_baseline_counts_confident_test_images_labelled_otherwise():
    from types import SimpleNamespace

    from probe_core.bayestrex import MISTAKE_CONFIDENCE, test_set_baseline

    # the "classifier" returns each test image's own probability row
    probs = torch.tensor([[0.9, 0.1, 0.0], [0.05, 0.9, 0.05], [0.1, 0.86, 0.04], [0.2, 0.8, 0.0], [0.0, 1.0, 0.0],
                          [0.1, 0.85, 0.05]])
    labels = torch.tensor([0, 0, 2, 0, 1, 0])
    data = SimpleNamespace(test_images=probs, test_labels=labels)
    [high_one] = parse_targets("high:1", ("a", "b", "c"))
    baseline = test_set_baseline(high_one, lambda x: x, data)
    mistakes = baseline["confident_mistakes"]
    # rows 1, 2 and 5 are called b with p >= 0.85 and labelled otherwise; row 3 (0.8) is below, row 4 is a real b
    assert mistakes["threshold"] == MISTAKE_CONFIDENCE == 0.85
    assert mistakes["count"] == 3 and mistakes["indices"] == [1, 2, 5]  # most confident first
    assert mistakes["labels"] == [0, 2, 0] and mistakes["confidences"] == pytest.approx([0.9, 0.86, 0.85])
    [ambiguous] = parse_targets("ambiguous:0,1", ("a", "b", "c"))
    assert "confident_mistakes" not in test_set_baseline(ambiguous, lambda x: x, data)


def test_ambiguous_hits_include_the_band_s_ends():
    [target] = parse_targets("ambiguous:0,1", NAMES)
    # 0.4 and 0.6 are in the band [0.4, 0.6], whichever class holds which
    ends = torch.tensor([[0.4, 0.6, 0.0, 0.0], [0.6, 0.4, 0.0, 0.0]], dtype=torch.float64)
    assert target.is_hit(ends).tolist() == [True, True]


def test_parsed_parts_hold_their_kind_text_arguments_and_targets():
    [uniform] = TargetSpec.parse("uniform", NAMES).parts
    assert (uniform.kind, uniform.text, uniform.arguments) == ("uniform", "uniform", ())
    [target] = uniform.targets
    assert (target.classes, target.num_classes, target.spec) == ((), 4, "uniform")
    [matrix] = TargetSpec.parse("ambiguous-matrix", NAMES).parts
    assert (matrix.kind, matrix.text, matrix.arguments, len(matrix.targets)) == (
        "ambiguous-matrix", "ambiguous-matrix", (), 6)
    [vector] = TargetSpec.parse("probs:0=0.7,2=0.3", NAMES).parts
    assert (vector.kind, vector.arguments, vector.targets[0].classes) == ("probs", (0.7, 0.0, 0.3, 0.0), (0, 2))
    assert TargetSpec.parse("probs:0=1,1=0", NAMES).parts[0].arguments == (1.0, 0.0, 0.0, 0.0)  # 0 is allowed
    with pytest.raises(ProbeError, match="finite and non-negative"):
        TargetSpec.vector(NAMES, [1.5, -0.5, 0.0, 0.0])


def test_join_keeps_the_classes_and_describe_shows_names_and_how_many_more():
    names = ("zero", "one", "two", "three", "four")
    one = TargetSpec.ambiguous(names, 4, 3)
    joined = TargetSpec.join([one])
    assert joined == one and joined.class_names == names
    assert one.describe() == "ambiguous between three and four"
    with pytest.raises(ProbeError, match="same classes"):
        TargetSpec.join([one, TargetSpec.high(NAMES, 1)])
    four = TargetSpec.join([TargetSpec.high(names, c) for c in range(4)])
    assert "targets)" not in four.describe() and four.describe().count("; ") == 3
    five = TargetSpec.join([four, TargetSpec.high(names, 4)])
    assert five.describe().endswith("; … (5 targets)") and "four" not in five.describe()
    assert "four" in five.describe(shown=5) and "targets)" not in five.describe(shown=5)
