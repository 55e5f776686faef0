"""Typed run configurations: what a run stores, read back as the same dataclass, and started from it alone."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from probe_core.bayestrex.compare import CompareRequest
from probe_core.bayestrex.latent_map import LatentMapRequest
from probe_core.bayestrex.request import SampleRequest, SamplerSettings
from probe_core.defuse.embedding_step import EmbeddingRequest
from probe_core.defuse.steps import CorrectRequest, DistillRequest, IdentifyRequest
from probe_core.errors import ProbeError
from probe_core.models import ModelSpec
from probe_core.models.spec import SEED_RANGE
from probe_core.runs.lifecycle import JobSpec, job_spec
from probe_core.runs.requests import from_record, record, refuse_unknown
from probe_core.runs.runconfig import config_of
from probe_core.runs.training import TrainRequest
from probe_core.runs.workspace import Workspace
from probe_core.suites.scoring import ScoreRequest

DIGITS = tuple(str(i) for i in range(10))
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _stored(config):
    return SimpleNamespace(kind=config.kind, config=record(config))


def test_every_kind_reads_back_as_its_dataclass():
    configs = [SampleRequest(dataset="digits", target="path:3->8:5", class_names=DIGITS, classifier="c", generator="g", chains=7),
               CompareRequest(dataset="digits", classifier_a="a", classifier_b="b"),
               TrainRequest(dataset="digits", specs=({"dataset": "digits", "kind": "vae"},), purpose="defaults"),
               IdentifyRequest(dataset="digits", samples_per_image=20),
               CorrectRequest(distill_run=4, lambdas=(0.5, 1.0))]
    for config in configs:
        assert config_of(_stored(config)) == config


def test_every_run_kind_has_a_typed_result_that_reads_back_from_its_record():
    import dataclasses

    from probe_core.bayestrex.results import ComparisonResult, SamplingResult
    from probe_core.defuse.results import CorrectionResult, DistillationResult, IdentificationResult
    from probe_core.runs.lifecycle import all_run_kinds, stored_result
    from probe_core.runs.runconfig import result_of

    kinds = all_run_kinds()
    assert {"sample", "compare", "train", "defuse-identify", "defuse-distill", "defuse-correct", "defuse-embedding",
            "suite-score", "latent-map"} <= set(kinds)
    for name, kind in kinds.items():  # each run kind returns a typed result, not a dict
        assert kind.request_type.kind == kind.result_type.kind == name
    target = {"spec": "high:3", "description": "high confidence in 3", "failed": False, "hit_rate": 0.5,
              "summary": {"hits": 5, "kept": 10}, "samples": [{"z": [0.0]}]}
    examples = [
        SamplingResult([target], seed=3, wall_seconds=1.5, dataset="digits", classifier="c", generator="g",
                       model_checks={"generator_warning": None}),
        ComparisonResult([{"classifier": "a", "hit_rates": [1.0]}], ["0"], ["a", "b"], "g"),
        IdentificationResult("digits", "c", "v", 100, 7, 5, [0, 7], 2.0),
        DistillationResult("digits", "c", "v", 1, 7, 2, True, 6, 0.5),
        CorrectionResult(2, "human", [], {"before": {}}, {"rule": "data"}, [], [], 0, {}, "c2", "c", 9.0)]
    for result in examples:
        stored = stored_result(result)
        run = SimpleNamespace(kind=result.kind, result=stored)
        read = result_of(run)
        assert type(read) is type(result)
        assert dataclasses.asdict(read) == stored  # what the run stores is the typed result's record
    assert "samples" not in stored_result(examples[0])["targets"][0]  # kept samples live in the store
    assert result_of(SimpleNamespace(kind="defuse-correct", result={"distill_run": 2})) is None  # an older shape


def test_typed_fields_replace_string_slicing():
    path = SampleRequest(dataset="digits", target="path:3->8:5", class_names=DIGITS)
    assert path.path == (3, 8, 5) and not path.is_matrix
    words = SampleRequest(dataset="words", target="path:three->eight:5", class_names=WORDS)
    assert words.path == (3, 8, 5) and words.target.text == "path:three->eight:5"
    matrix = SampleRequest(dataset="digits", target="ambiguous-matrix", class_names=DIGITS)
    assert matrix.is_matrix and matrix.path is None


def test_a_stored_run_rebuilds_its_job_from_the_config_alone():
    config = SampleRequest(dataset="digits", target="high:3", class_names=DIGITS, classifier="c", generator="g", chains=5, seed=2)
    spec = job_spec(config, data_dir="/data")
    assert spec.kind == "sample" and spec.data_dir == "/data" and spec.device == "cpu"
    assert spec.request["target"] == "high:3" and spec.request["chains"] == 5 and spec.request["seed"] == 2
    # what a worker process reads from the runs table: the job's row and the run's config, the request stored once
    assert "request" not in json.loads(spec.to_json()) and spec.made is config
    stored = JobSpec.from_dict(json.loads(spec.to_json()), record(config))
    assert stored == spec and from_record(SampleRequest, stored.request) == config
    with pytest.raises(ProbeError, match="older version"):  # a job stored as a code path is not run
        JobSpec.from_dict({"builder": "probe_core.bayestrex.jobs:sampling_job", "arguments": {}})
    with pytest.raises(ProbeError, match="unknown run kind 'nothing'"):
        JobSpec("nothing", {}).build_for(None)


def _fields(request) -> dict:
    """A request's record as an older version stored it (without the version, so it is checked as read back):
    its fields by name."""
    return {key: value for key, value in record(request).items() if key != "request_version"}


def test_a_sample_request_checks_its_settings_however_it_is_made():
    """Not only build: the constructor and a run stored by an older version, read back, refuse what a run cannot
    use; a record of this version was checked when its request was made and is read back as stored."""
    from probe_core.runs.requests import REQUEST_VERSION

    made = SampleRequest(dataset="digits", target="high:3", class_names=DIGITS, executor=" local ", shards=None)
    assert made.executor == "local" and made.shards == 1
    assert record(made)["request_version"] == REQUEST_VERSION and from_record(SampleRequest, record(made)) == made
    for bad, message in (({"chains": 0}, "chains"), ({"sampler": "gibbs"}, "unknown sampler"),
                         ({"sigma": -1.0}, "sigma"), ({"shards": 0}, "shards"), ({"warmup": "ten"}, "warm"),
                         ({"init": "anywhere"}, "unknown chain start")):
        with pytest.raises(ProbeError, match=message):
            SampleRequest(dataset="digits", target="high:3", class_names=DIGITS, **bad)
        older = {**_fields(made), **bad}
        with pytest.raises(ProbeError, match=message):
            from_record(SampleRequest, older)
        assert config_of(SimpleNamespace(kind="sample", config=older)) is None


def test_sampler_settings_are_valid_by_construction_and_carried_by_the_request():
    with pytest.raises(ProbeError, match="chains"):
        SamplerSettings(chains=0)
    request = SampleRequest(dataset="digits", target="high:3", class_names=DIGITS, chains=6, seed=3)
    settings = request.sampler_settings()
    assert isinstance(settings, SamplerSettings) and (settings.chains, settings.seed) == (6, 3)
    # what the sampler derives (a shard's seed past the range a person may give) is not checked again
    last = SEED_RANGE[1]
    shard = SamplerSettings(chains=6, seed=last).derived(seed=last + 7919, init="classes")
    assert (shard.seed, shard.init, shard.chains) == (last + 7919, "classes", 6) and settings.seed == 3
    with pytest.raises(ProbeError, match="not sampler settings"):
        settings.derived(executor="ray")


def test_a_comparison_request_checks_its_settings_however_it_is_made(tmp_path):
    made = CompareRequest(dataset="digits", classifier_a="a", classifier_b="b")
    for bad, message in (({"classifier_b": "a"}, "two different"), ({"classifier_a": ""}, "two classifiers"),
                         ({"chains": 0}, "chains"), ({"sigma": 0.0}, "sigma")):
        with pytest.raises(ProbeError, match=message):
            CompareRequest(**{**_fields(made), **bad})
        with pytest.raises(ProbeError, match=message):
            from_record(CompareRequest, {**_fields(made), **bad})
        with pytest.raises(ProbeError, match=message):
            CompareRequest.build(Workspace(tmp_path).registry, **{**_fields(made), **bad})


def test_a_training_request_checks_its_specs_however_it_is_made():
    made = TrainRequest(dataset="digits", specs=[ModelSpec(dataset="digits", kind="vae")])
    assert made.specs == ({**record(made)["specs"][0]},) and isinstance(made.specs[0], dict)
    for bad, message in (({"specs": []}, "nothing to train"), ({"specs": [{"colour": 1}]}, "not a model spec"),
                         ({"specs": ["vae"]}, "not a model spec"), ({"purpose": " "}, "say why"),
                         ({"executor": "spark"}, "unknown executor")):
        with pytest.raises(ProbeError, match=message):
            TrainRequest(**{**_fields(made), **bad})
        with pytest.raises(ProbeError, match=message):
            from_record(TrainRequest, {**_fields(made), **bad})


@pytest.mark.parametrize("request_type, field_name", [(LatentMapRequest, "run"), (EmbeddingRequest, "distill_run")])
def test_a_map_request_holds_a_run_id(request_type, field_name):
    assert getattr(request_type(**{field_name: 3}), field_name) == 3
    assert type(getattr(request_type(**{field_name: np.int64(3)}), field_name)) is int
    for bad in (0, -1, "3", 2.0, True, None):
        with pytest.raises(ProbeError, match="run id"):
            request_type(**{field_name: bad})
        with pytest.raises(ProbeError, match="run id"):
            from_record(request_type, {field_name: bad})


def test_a_score_request_names_its_suite_and_classifier():
    assert ScoreRequest("smoke", "digits-classifier").suite == "smoke"
    for suite, classifier in (("", "c"), ("smoke", " "), ("smoke", None)):
        with pytest.raises(ProbeError, match="name the"):
            ScoreRequest(suite, classifier)


def test_configs_of_unknown_kinds_or_older_shapes_read_as_none():
    assert config_of(SimpleNamespace(kind="defuse-embedding-v0", config={})) is None
    assert config_of(SimpleNamespace(kind="sample", config={"recipe": "novel-class", "dataset": "digits"})) is None


TOY_RUN_KIND = '''
"""A toy run kind, the whole of it in one file: how many training images of one class a data set has."""
from dataclasses import dataclass
from typing import ClassVar

from probe_core.catalog import load_dataset
from probe_core.runs.lifecycle import StoredResult, job_of, run_kind
from probe_core.runs.requests import BuiltFromSettings


@dataclass(frozen=True)
class CountResult(StoredResult):
    kind: ClassVar[str] = "toy-count"

    count: int


@run_kind(CountResult)
@dataclass(frozen=True)
class CountRequest(BuiltFromSettings):
    kind: ClassVar[str] = "toy-count"

    dataset: str
    label: int


@job_of(CountRequest)
def count_job(registry, request, device="cpu"):
    def run(context):
        context.report(0.5, "counting")
        labels = load_dataset(request.dataset, registry.data_dir).train_labels
        return CountResult(int((labels == request.label).sum()))

    return run
'''


def test_a_run_kind_declared_in_one_module_runs_is_stored_and_reads_back(tmp_path, monkeypatch):
    import importlib
    import sys

    from probe_core.catalog import load_dataset
    from probe_core.runs.lifecycle import RUN_KINDS, job_of, run_kind, run_now
    from probe_core.runs.runconfig import result_of
    from probe_core.runs.workspace import Workspace

    (tmp_path / "toy_run_kind.py").write_text(TOY_RUN_KIND)
    monkeypatch.syspath_prepend(str(tmp_path))  # a worker process imports the job's module by its name
    try:
        toy = importlib.import_module("toy_run_kind")
        registry = Workspace(tmp_path / "workspace").registry
        request = toy.CountRequest("digits", 3)
        run_id, result = run_now(registry, request)
        run = registry.store.get_run(run_id)
        assert (run.kind, run.status) == ("toy-count", "done")
        assert config_of(run) == request and result_of(run) == result
        assert result.count == int((load_dataset("digits").train_labels == 3).sum()) > 0
        with pytest.raises(ProbeError, match="already"):  # a second request type cannot take the kind
            run_kind(toy.CountResult)(type("OtherRequest", (), {"kind": "toy-count"}))
        with pytest.raises(ProbeError, match="'sample'"):  # a request and a result of different kinds
            run_kind(toy.CountResult)(type("Mismatched", (), {"kind": "sample"}))
        with pytest.raises(ProbeError, match="already has the job count_job"):  # one job a kind
            job_of(toy.CountRequest)(lambda registry, request, device: None)
        with pytest.raises(ProbeError, match="not a declared run kind"):  # the kind comes first
            job_of(type("Undeclared", (), {"kind": "toy-undeclared"}))(toy.count_job)
    finally:
        RUN_KINDS.pop("toy-count", None)
        sys.modules.pop("toy_run_kind", None)


def _cli_request(registry, *argv):
    """The request ``probe sample`` builds from ``argv`` (nothing trained: the defaults keep their name)."""
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.cli import build_parser
    from probe_core.cli.sample import _given_settings

    args = build_parser().parse_args(["sample", *argv])
    return SampleRequest.build(registry, dataset=args.dataset, target=args.target, classifier=args.classifier,
                               generator=args.generator, **_given_settings(args))


def test_the_matrix_has_its_own_sampler_defaults_on_the_command_line(tmp_path):
    from probe_core.bayestrex import MATRIX_SAMPLER_DEFAULTS, SAMPLER_DEFAULTS
    from probe_core.runs.workspace import Workspace

    registry = Workspace(tmp_path / "ws").registry

    def settings(*argv):
        request = _cli_request(registry, *argv)
        return {key: getattr(request, key) for key in SAMPLER_DEFAULTS}

    assert settings("--target", "ambiguous-matrix") == MATRIX_SAMPLER_DEFAULTS  # as typed
    assert settings("--target", "high:3") == SAMPLER_DEFAULTS
    assert settings("--target", "ambiguous-matrix", "--chains", "8")["chains"] == 8  # what is given wins
    assert MATRIX_SAMPLER_DEFAULTS["chains"] * MATRIX_SAMPLER_DEFAULTS["warmup"] < \
        SAMPLER_DEFAULTS["chains"] * SAMPLER_DEFAULTS["warmup"]
    assert not any((tmp_path / "ws" / "models").glob("*"))  # nothing was trained to build them


def test_the_matrix_defaults_follow_the_image_size(tmp_path):
    """From 28×28 on, a gradient costs about ten times the digits one: fewer chains and iterations per pair."""
    import numpy as np

    from probe_core.bayestrex import LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS, MATRIX_SAMPLER_DEFAULTS, sampler_defaults
    from probe_core.errors import ProbeError
    from probe_core.runs.workspace import Workspace
    from probe_core.sampling.targets import TargetSpec

    matrix = TargetSpec.matrix(DIGITS)
    assert sampler_defaults(matrix, (1, 8, 8)) == MATRIX_SAMPLER_DEFAULTS
    assert sampler_defaults(matrix, (1, 28, 28)) == LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS
    assert sampler_defaults(matrix, (3, 32, 32)) == LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS
    large = LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS
    assert large["chains"] * large["warmup"] < MATRIX_SAMPLER_DEFAULTS["chains"] * MATRIX_SAMPLER_DEFAULTS["warmup"]
    with pytest.raises(ProbeError, match="image size"):
        sampler_defaults(matrix)
    rng = np.random.default_rng(0)
    path = tmp_path / "large.npz"
    np.savez(path, x=rng.integers(0, 255, (40, 28, 28), dtype=np.uint8), y=np.arange(40) % 4)
    request = _cli_request(Workspace(tmp_path / "ws").registry, "--target", "ambiguous-matrix",
                           "--dataset", f"arrays:{path}")
    assert {key: getattr(request, key) for key in large} == large
    assert request.class_names == ("0", "1", "2", "3") and len(request.targets) == 6  # the pairs


def test_the_api_documents_every_sample_setting_with_the_request_types_default():
    import probe_core as mp
    from probe_core.bayestrex.request import SAMPLE_SETTINGS

    for name in SAMPLE_SETTINGS:
        assert f"{name}={getattr(SampleRequest, name)!r}" in mp.sample.__doc__


def test_unknown_settings_are_refused_by_name_with_the_ones_the_request_has(tmp_path):
    refuse_unknown({"chains": 4}, ("chains", "warmup"), "sampler")
    with pytest.raises(ProbeError, match=r"unknown sampler setting\(s\) steps, temperature; use chains, warmup"):
        refuse_unknown({"temperature": 1, "steps": 2, "chains": 4}, ("chains", "warmup"), "sampler")
    with pytest.raises(ProbeError, match=r"unknown comparison setting\(s\) bogus; use chains"):
        CompareRequest.build(Workspace(tmp_path).registry, dataset="digits", classifier_a="a", classifier_b="b",
                             bogus=1)


def test_a_training_request_checks_its_specs_before_any_run_is_stored(tmp_path):
    registry = Workspace(tmp_path).registry
    request = TrainRequest.build(registry, dataset="digits", specs=[ModelSpec(kind="vae", epochs=2),
                                                                    {"kind": "classifier"}], purpose="defaults")
    assert [spec["kind"] for spec in request.specs] == ["vae", "classifier"] and request.specs[0]["epochs"] == 2
    assert from_record(TrainRequest, record(request)) == request
    with pytest.raises(ProbeError, match="nothing to train"):
        TrainRequest.build(registry, dataset="digits", specs=[])
    with pytest.raises(ProbeError, match="not a model spec"):
        TrainRequest.build(registry, dataset="digits", specs=[{"kind": "vae", "colour": "red"}])
    with pytest.raises(ProbeError, match="unknown model kind"):
        TrainRequest.build(registry, dataset="digits", specs=[{"kind": "forest"}])
    with pytest.raises(ProbeError, match="say why"):
        TrainRequest.build(registry, dataset="digits", specs=[{"kind": "vae"}], purpose=" ")
    assert TrainRequest.build(registry, dataset="digits", specs=[{"kind": "vae"}],
                              purpose="benchmark").purpose == "benchmark"


@pytest.mark.parametrize("request_type, required, number", [(IdentifyRequest, {}, "samples_per_image"),
                                                            (DistillRequest, {"identify_run": 1}, "n_components"),
                                                            (CorrectRequest, {"distill_run": 1}, "epochs")])
def test_defuse_requests_are_built_with_one_clear_message_for_bad_settings(request_type, required, number):
    """from_settings() keeps the defaults, refuses a name the request lacks (naming it), a wrong type as ProbeError."""
    assert request_type.from_settings(**required) == request_type(**required)
    with pytest.raises(ProbeError, match=f"unknown {request_type.setting_word} setting.*bogus"):
        request_type.from_settings(**required, bogus=1)
    with pytest.raises(ProbeError):
        request_type.from_settings(**required, **{number: "many"})


@pytest.mark.parametrize("request_type, required", [(IdentifyRequest, {}), (DistillRequest, {"identify_run": 1}),
                                                    (CorrectRequest, {"distill_run": 1})])
def test_defuse_requests_accept_their_declared_ranges_and_refuse_beyond_them(request_type, required):
    """Every bound a request declares (what the pages' widgets offer) is accepted, and a step past it refused
    with the setting's name; a whole-number setting refuses a fraction."""
    assert request_type.ranges
    for name, (low, high) in request_type.ranges.items():
        whole = isinstance(low, int) and isinstance(high, int)
        step = 1 if whole else max(abs(high - low) * 1e-3, 1e-9)
        for inside in (low, high):
            assert getattr(request_type.from_settings(**required, **{name: inside}), name) == inside
        for outside in (low - step, high + step):
            with pytest.raises(ProbeError, match=r"must be a (whole )?number from \S+ to \S+, got"):
                request_type.from_settings(**required, **{name: outside})
        if whole:
            with pytest.raises(ProbeError, match="whole number"):
                request_type.from_settings(**required, **{name: low + 0.5})


def test_distill_after_names_an_unknown_distillation_setting():
    with pytest.raises(ProbeError, match="distill_after: unknown distillation setting.*clusters"):
        IdentifyRequest.from_settings(distill_after={"clusters": 3})
    assert IdentifyRequest.from_settings(distill_after={"tau": 0.5}).distill_after == {"tau": 0.5}


def test_a_stored_kind_is_found_through_the_entry_points_and_the_runs_layer_imports_no_domain():
    """A fresh process reads a stored run of any kind: reading runs back imports no domain, and the kind's
    module is imported (through the package's entry points) when a run of that kind is first read."""
    import subprocess
    import sys

    code = """
import sys
from types import SimpleNamespace
import probe_core.runs.runconfig as runconfig
import probe_core.runs.launchers
domains = ("probe_core.bayestrex", "probe_core.defuse", "probe_core.suites")
assert not [m for m in sys.modules if m.startswith(domains)], sorted(m for m in sys.modules if m.startswith(domains))
run = SimpleNamespace(kind="defuse-correct", config={"distill_run": 4, "lambdas": [0.5], "steps_per_epoch": 7})
request = runconfig.config_of(run)
assert "probe_core.defuse.correct_step" in sys.modules and type(request).__name__ == "CorrectRequest"
assert request.lambdas == (0.5,) and request.steps_per_epoch == 7
assert runconfig.config_of(SimpleNamespace(kind="no-such-kind", config={})) is None
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_every_declared_run_kind_is_named_in_the_entry_points():
    """pyproject.toml's model_probe.run_kinds names each kind's module: a kind left out would never be read back
    in a process that had not imported its module."""
    import importlib.metadata
    import tomllib
    from pathlib import Path

    from probe_core.runs.lifecycle import RUN_KIND_ENTRY_POINTS, all_run_kinds

    declared = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    listed = declared["project"]["entry-points"][RUN_KIND_ENTRY_POINTS]
    installed = {entry.name: entry.value for entry in importlib.metadata.entry_points(group=RUN_KIND_ENTRY_POINTS)}
    assert installed == listed  # the installed metadata is this checkout's (pip install -e . after a change)
    kinds = all_run_kinds()  # imports every listed module: each must declare the kind it is listed for
    assert set(listed) <= set(kinds)
    assert set(listed) == {name for name, kind in kinds.items() if kind.request_type.__module__.startswith("probe_core.")}



def test_every_run_kind_builds_its_request_with_a_check_before_anything_is_stored(tmp_path):
    import inspect

    from probe_core.bayestrex.latent_map import LatentMapRequest
    from probe_core.defuse.embedding_step import EmbeddingRequest
    from probe_core.runs.lifecycle import all_run_kinds
    from probe_core.runs.requests import BuiltFromSettings

    # one constructor for front ends on every kind, with one signature: build(registry, **settings by name)
    for kind in all_run_kinds().values():
        assert issubclass(kind.request_type, BuiltFromSettings), kind.name
        parameters = list(inspect.signature(kind.request_type.build).parameters.values())
        assert parameters[0].name == "registry", kind.name
        assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in parameters[1:]), kind.name
    workspace = Workspace(tmp_path)
    registry, store = workspace.registry, workspace.store
    sampling = store.create_run("sample", {})
    distilling = store.create_run("defuse-distill", {})
    assert LatentMapRequest.build(registry, run=sampling) == LatentMapRequest(sampling)
    assert EmbeddingRequest.build(registry, distill_run=distilling) == EmbeddingRequest(distilling)
    for build, key, wrong in ((LatentMapRequest.build, "run", distilling),
                              (EmbeddingRequest.build, "distill_run", sampling),
                              (DistillRequest.build, "identify_run", sampling),
                              (CorrectRequest.build, "distill_run", sampling)):
        with pytest.raises(ProbeError, match=f"run {wrong} is a"):
            build(registry, **{key: wrong})
        with pytest.raises(ProbeError, match="no run 999; expected a"):
            build(registry, **{key: 999})
    assert len(store.list_runs()) == 2
