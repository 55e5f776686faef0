"""The Ray executor on a real Ray instance on this machine (``ray.init(num_cpus=2)``): the ambiguity targets,
Defuse identification and the λ sweep give the same results as ``local``; progress, Stop and a killed worker.

The same arithmetic on both sides: the local runs use one torch thread, as Ray's one-CPU workers do, because
a reduction split over threads may round differently and Hamiltonian trajectories amplify any difference.
"""

import os
import signal
import time

import numpy as np
import pytest
import torch
from helpers import MISLABELLED, claim_group, recording

try:
    import ray
except ImportError:  # CI installs the dev requirements, which include Ray: there this must fail, not skip
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("Ray is not installed (pip install -e '.[ray]')", allow_module_level=True)

from probe_core.bayestrex import sample
from probe_core.defuse import review, steps
from probe_core.defuse.queries import failures_of
from probe_core.progress import CallbackReporter
from probe_core.runs.scaleout import LocalShards, RayShards

PAIRS = "ambiguous:0,1;ambiguous:3,5;ambiguous:4,9;ambiguous:7,1"


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory):
    claim_group(tmp_path_factory, "ray")
    ray.init(address="local", num_cpus=2, object_store_memory=300 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield RayShards()
    ray.shutdown()


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _models(workspace):
    registry = workspace.registry
    return (registry.resolve("default", "classifier", "digits"), registry.resolve("default", "generator", "digits"))


def _sample(workspace, executor, shards=2, **settings):
    classifier, generator = _models(workspace)
    run_id = workspace.store.create_run("sample", {"test": "scaleout"}, status="running")
    options = {"chains": 4, "warmup": 20, "samples": 10, "seed": 1, **settings}
    result = sample(classifier.module, generator.module, options.pop("spec", PAIRS),
                    class_names=classifier.class_names, store=workspace.store, run_id=run_id, executor=executor,
                    shards=shards, **options)
    return run_id, result


def test_ambiguity_targets_are_the_same_on_local_and_ray_and_progress_is_one_bar(trained_workspace, ray_instance,
                                                                                  one_thread):
    progress = []
    local_run, local = _sample(trained_workspace, LocalShards())
    ray_run, remote = _sample(trained_workspace, ray_instance, reporter=recording(progress))
    assert remote["executor"] == "ray" and remote["shards"] == 2 and "not_done" not in remote
    for a, b in zip(local["targets"], remote["targets"], strict=True):
        assert a["spec"] == b["spec"] and a["summary"]["hits"] == b["summary"]["hits"]
        assert a["target_index"] == b["target_index"]
    stored = [trained_workspace.store.get_samples(run) for run in (local_run, ray_run)]
    assert len(stored[0]) == len(stored[1]) == 4 * 4 * 10
    key = lambda s: (s["target_index"], s["chain"], s["step"])  # noqa: E731
    for a, b in zip(sorted(stored[0], key=key), sorted(stored[1], key=key)):
        assert key(a) == key(b)
        np.testing.assert_allclose(a["z"], b["z"], atol=1e-4)
    # one fraction over both shards, ending at 1, with each shard's worker process known
    assert progress and progress[-1].progress == pytest.approx(1.0) and progress[-1].shards_done == 2
    assert {p.shards for p in progress} == {2} and len(progress[-1].pids) == 2
    assert all(pid != os.getpid() for pid in progress[-1].pids.values())


def test_defuse_identification_and_sweep_are_the_same_on_local_and_ray(trained_workspace, flawed_run,
                                                                       ray_instance, one_thread):
    registry, store = trained_workspace.registry, trained_workspace.store
    identified = {}
    for executor in ("local", "ray"):
        run_id, result = steps.run_step(registry, store, steps.IdentifyRequest(
            dataset=MISLABELLED, classifier=flawed_run["classifier"], samples_per_image=60, max_images=150,
            shards=3, executor=executor))
        identified[executor] = (result, failures_of(store, run_id))
    (local, local_failures), (remote, remote_failures) = identified["local"], identified["ray"]
    assert local.failures == remote.failures > 0 and not remote.not_done
    np.testing.assert_array_equal(local_failures.source_index, remote_failures.source_index)
    np.testing.assert_allclose(local_failures.latents, remote_failures.latents, atol=1e-5)
    assert local_failures.source_index.max() >= 100  # the third shard's images count in the whole set

    source, _ = review.auto_label(registry, store, flawed_run["distill_run"], "default")
    swept = {}
    for executor in ("local", "ray"):
        _, result = steps.run_step(registry, store, steps.CorrectRequest(
            distill_run=flawed_run["distill_run"], source=source, lambdas=(0.5, 5.0), epochs=1,
            samples_per_region=64, executor=executor))
        swept[executor] = result
    assert swept["ray"].lambdas_not_done == {"defuse": [], "baseline": []}
    for phase in ("sweep", "baseline_sweep"):
        for a, b in zip(getattr(swept["local"], phase), getattr(swept["ray"], phase), strict=True):
            assert a["lambda"] == b["lambda"] and a["epoch"] == b["epoch"]
            assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=0.005)
    assert swept["local"].results["defuse"]["lambda"] == swept["ray"].results["defuse"]["lambda"]


def test_stop_cancels_the_outstanding_shards_and_keeps_what_was_done(trained_workspace, ray_instance):
    started = time.monotonic()
    run_id, result = _sample(trained_workspace, ray_instance, warmup=50_000, samples=10,
                             reporter=CallbackReporter(should_stop=lambda: time.monotonic() - started > 4))
    # stopped, not finished: the run says it was cancelled and the two outstanding shards are reported, not run
    assert result["cancelled"] and len(result["not_done"]) == 2


def _kill_first_worker(killed: list) -> CallbackReporter:
    def on_report(progress, message, shards) -> None:
        if not killed and shards["pids"]:
            pid = sorted(shards["pids"].items())[0][1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return CallbackReporter(on_report)


def test_a_killed_worker_is_retried_and_the_run_completes(trained_workspace, ray_instance):
    killed = []
    run_id, result = _sample(trained_workspace, ray_instance, warmup=40, reporter=_kill_first_worker(killed))
    assert killed and "not_done" not in result
    assert len(result["targets"]) == 4 and trained_workspace.store.count_samples(run_id) == 4 * 4 * 10


def test_a_shard_lost_for_good_is_reported_and_the_rest_is_stored(trained_workspace, ray_instance):
    killed = []
    run_id, result = _sample(trained_workspace, RayShards(retries=0), warmup=40,
                             reporter=_kill_first_worker(killed))
    assert killed and len(result["not_done"]) == 1
    lost = result["not_done"][0]
    assert lost["covers"] in ("targets 1-2 of 4", "targets 3-4 of 4") and lost["error"]
    done = [t["target_index"] for t in result["targets"]]
    assert len(done) == 2
    assert {s["target_index"] for s in trained_workspace.store.get_samples(run_id)} == set(done)


def test_models_trained_at_once_on_ray_are_those_trained_here_and_the_run_shows_each(tmp_path, ray_instance,
                                                                                     one_thread):
    """A training run with the Ray executor trains the missing models at once, one task each, and this process
    stores each as it comes back: the same ids and weights as training them here one after another (one thread on
    both sides), each model 'done' in the run's details; a model already stored is not trained again."""
    from probe_core.models import ModelSpec
    from probe_core.runs.jobs import JobManager
    from probe_core.runs.training import TrainRequest, train_models, training_job
    from probe_core.runs.workspace import Workspace

    specs = [ModelSpec(dataset="digits", kind="classifier", epochs=1),
             ModelSpec(dataset="digits", kind="vae", epochs=1, latent_dim=2),
             ModelSpec(dataset="digits", kind="classifier", classes=[0, 1, 2], epochs=1, seed=3)]
    here = Workspace(tmp_path / "here")
    local = train_models(here.registry, specs[:2], "local")
    on_ray = Workspace(tmp_path / "ray")
    kept = on_ray.registry.get_or_train(specs[2])  # already stored: the run must not train it again
    manager = JobManager(on_ray.store)
    request = TrainRequest.build(on_ray.registry, dataset="digits", specs=specs, executor="ray")
    run = manager.wait(manager.submit("train", {"x": 1}, training_job(on_ray.registry, request)), timeout=300)
    assert run.status == "done", run.error
    assert [entry["status"] for entry in run.details["models"].values()] == ["done"] * 3
    assert run.details["shards"] == 2 and run.details["shards_done"] == 2  # the stored model was no shard
    for trained_here in local:
        stored = on_ray.registry.load(trained_here.id)
        assert stored.kind == trained_here.kind
        weights, expected = stored.module.state_dict(), trained_here.module.state_dict()
        assert all(torch.allclose(weights[name].float(), expected[name].float(), atol=1e-5) for name in expected)
    assert on_ray.registry.load(kept.id).metrics["train_seconds"] == kept.metrics["train_seconds"]


def test_a_generator_trained_on_ray_gets_its_feature_network_trained_first_and_stored(tmp_path, ray_instance,
                                                                                   one_thread):
    """At real size a generator's feature network is a stored classifier (ModelSpec.feature_network_spec): on
    Ray it trains in a first wave beside the other models and the generator in a second, with it; the same
    weights as training them here, and only the models asked for are reported stored."""
    import numpy as np

    from probe_core.models import ModelSpec
    from probe_core.runs.training import train_models
    from probe_core.runs.workspace import Workspace

    path = tmp_path / "colour.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 255, (200, 32, 32, 3), dtype=np.uint8), y=np.arange(200) % 10)
    specs = [ModelSpec(dataset=f"arrays:{path}", kind="classifier", epochs=1),
             ModelSpec(dataset=f"arrays:{path}", kind="rae", epochs=3)]
    local = train_models(Workspace(tmp_path / "here").registry, specs, "local")
    on_ray = Workspace(tmp_path / "ray").registry
    stored = []
    generator = train_models(on_ray, specs, "ray", on_stored=lambda model_id, metrics: stored.append(model_id))[1]
    assert sorted(stored) == sorted(model.id for model in local)
    feature = generator.record["spec"]["feature_network"]
    assert feature == local[1].record["spec"]["feature_network"] and on_ray.exists(feature)
    for trained_here in local:
        weights, expected = on_ray.load(trained_here.id).module.state_dict(), trained_here.module.state_dict()
        assert all(torch.allclose(weights[name].float(), expected[name].float(), atol=1e-5) for name in expected)
