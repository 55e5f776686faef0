"""The typed target spec: parsed once, built by constructors, written in class names, and a new kind is one file."""

import pytest
import torch
from helpers import toy_target_kind
from torch import nn

from probe_core.errors import ProbeError
from probe_core.sampling.targets import SPEC_KINDS, AmbiguousTarget, TargetSpec, spec_help

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
DIGITS = tuple(str(i) for i in range(10))


def test_constructors_make_the_spec_that_parsing_its_text_makes():
    made = [TargetSpec.high(WORDS, 7), TargetSpec.ambiguous(WORDS, 9, 4), TargetSpec.uniform(WORDS),
            TargetSpec.vector(WORDS, [0.0] * 8 + [0.7, 0.3]), TargetSpec.path_between(WORDS, "eight", "nine", 3),
            TargetSpec.matrix(WORDS)]
    for spec in made:
        assert TargetSpec.parse(spec.text, WORDS) == spec
    assert [spec.text for spec in made] == ["high:seven", "ambiguous:four,nine", "uniform",
                                            "probs:eight=0.7,nine=0.3", "path:eight->nine:3", "ambiguous-matrix"]
    # an int is an index, never a name: class 3 of a classifier named 0, 1, 3, 6, 9 is "6"
    subset = ("0", "1", "3", "6", "9")
    assert [TargetSpec.high(subset, k).text for k in range(5)] == [f"high:{name}" for name in subset]
    assert TargetSpec.high(subset, "3").targets[0].classes == (2,)  # text: the name wins
    joined = TargetSpec.join(made[:2])
    assert joined.text == "high:seven;ambiguous:four,nine" and len(joined.targets) == 2


def test_high_seven_stays_high_seven_through_a_request_and_its_stored_record():
    from types import SimpleNamespace

    from probe_core.bayestrex.request import SampleRequest
    from probe_core.runs.requests import record
    from probe_core.runs.runconfig import config_of

    for typed in ("high:7", "HIGH: Seven", "high:seven"):
        request = SampleRequest(dataset="words", target=TargetSpec.parse(typed, WORDS), class_names=WORDS)
        stored = record(request)
        assert stored["target"] == "high:seven"
        assert config_of(SimpleNamespace(kind="sample", config=stored)) == request


def test_typed_fields_answer_what_callers_used_to_slice_out_of_the_text():
    path = TargetSpec.parse("path:eight->one:4", WORDS)
    assert path.path == (8, 1, 4) and not path.is_matrix and path.pairs == ()
    matrix = TargetSpec.parse("ambiguous-matrix", DIGITS)
    assert matrix.is_matrix and matrix.path is None and len(matrix.pairs) == 45
    assert all(isinstance(t, AmbiguousTarget) for t in matrix.targets)
    both = TargetSpec.parse("ambiguous:3,5;high:1", DIGITS)
    assert both.pairs == ((3, 5),) and not both.is_matrix
    assert both.describe() == "ambiguous between 3 and 5; high confidence in 1"


@pytest.mark.parametrize("make, message", [
    (lambda: TargetSpec.ambiguous(DIGITS, 2, 2), "must differ"),
    (lambda: TargetSpec.path_between(DIGITS, 1, 2, 1), "a whole number from 2 to 101"),
    (lambda: TargetSpec.vector(DIGITS, [0.5] * 10), "sum to 1"),
    (lambda: TargetSpec.vector(DIGITS, [1.0]), "needs 10 probabilities"),
    (lambda: TargetSpec.high(DIGITS, "eleven"), "unknown class"),
    (lambda: TargetSpec.high(DIGITS, 10), "out of range"),
    (lambda: TargetSpec.high(("only",), 0), "at least 2 classes"),
    (lambda: TargetSpec.join([TargetSpec.high(DIGITS, 1), TargetSpec.high(WORDS, 1)]), "same classes"),
])
def test_constructors_refuse_bad_targets_with_one_clear_message(make, message):
    with pytest.raises(ProbeError, match=message):
        make()


@pytest.fixture
def toy_kind(tmp_path):
    with toy_target_kind(tmp_path) as module:
        yield module


def test_a_new_target_kind_is_one_file_and_everything_picks_it_up(toy_kind):
    from probe_core.bayestrex import sample
    from probe_core.cli import build_parser

    spec = TargetSpec.parse("low:seven;high:1", WORDS)
    assert spec.text == "low:seven;high:one" and isinstance(spec.targets[0], toy_kind.LowTarget)
    assert "low:C" in spec_help() and "low" in SPEC_KINDS
    sample_help = build_parser()._subparsers._group_actions[0].choices["sample"].format_help()
    assert "low:C" in sample_help
    torch.manual_seed(1)
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(16, 3), nn.Softmax(dim=1))
    generator = nn.Linear(2, 16)  # latents (B, 2) -> images (B, 1, 4, 4)
    generator.latent_dim = 2
    generator.decode = lambda z: torch.sigmoid(generator(z)).view(-1, 1, 4, 4)
    result = sample(classifier, generator, TargetSpec.parse("low:b", ("a", "b", "c")), class_names=("a", "b", "c"),
                    chains=4, warmup=10, samples=10, init="prior")
    [entry] = result["targets"]
    assert entry["spec"] == "low:b" and entry["description"] == "low confidence in b" and entry["classes"] == [1]
    assert entry["summary"]["kept"] == 40
