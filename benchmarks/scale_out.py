"""Ray against local on this machine: the 45-pair digits ambiguity matrix and a Defuse identification.

    .venv/bin/python benchmarks/scale_out.py [--workspace DIR]   # the README figures
    .venv/bin/python benchmarks/scale_out.py --quick             # a smoke run

Side by side in one run, with the default digits models:
1. the ambiguity matrix (32 chains per pair, 100 + 100 iterations, as the README's matrix command) and a Defuse
   identification (Q = 200 on every training image): ``local`` (one process, its default one shard) against
   ``ray`` with two single-threaded workers (two shards), on the same 2 cores; overhead = ray / local - 1;
2. the matrix on Ray with N = 1 and 2 single-threaded workers (two shards each);
3. from the measured per-shard cost and transfer sizes, an estimate for the MNIST matrix and for
   identification on 60,000 images with 8 workers (printed with its assumptions);
4. training two real-size classifiers (the 32x32 recipe, two seeds, on the SVHN-like stand-in's quick set, which
   needs the MNIST test set of ../shared): one after another with both threads (``local``) against both at once
   on Ray, a thread each (``probe --executor ray models defaults``, ``train_models``): ray / local.
Ray's start (joining or starting the instance) is timed apart: a dashboard or CLI session pays it once.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import ray  # noqa: E402
from real_size import MNIST, build_data  # noqa: E402

from probe_core.bayestrex import sample  # noqa: E402
from probe_core.catalog import load_dataset  # noqa: E402
from probe_core.defuse.identification import identify_failures  # noqa: E402
from probe_core.catalog import canonical_dataset_name  # noqa: E402
from probe_core.models import ModelSpec  # noqa: E402
from probe_core.runs.scaleout import LocalShards, RayShards, ShardTask, shard_seed, split_evenly  # noqa: E402
from probe_core.runs.training import train_models  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def start_ray(workers: int) -> float:
    ray.shutdown()
    seconds, _ = timed(lambda: ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                                        object_store_memory=500 * 1024**2))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="with the default digits models (trained here if missing)")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test, not the figures)")
    args = parser.parse_args()
    workspace = Workspace(Path(args.workspace or tempfile.mkdtemp(prefix="probe-scale-")))
    for spec in workspace.registry.default_specs("digits", seed=0):
        workspace.registry.get_or_train(spec)
    classifier = workspace.registry.resolve("default", "classifier", "digits")
    vae = workspace.registry.resolve("default", "generator", "digits")
    data = load_dataset("digits")
    chains, iterations, per_image = (4, 20, 50) if args.quick else (32, 100, 200)
    images = data.train_images[:200] if args.quick else data.train_images
    labels = data.train_labels[:200] if args.quick else data.train_labels

    def matrix(executor, shards):
        return sample(classifier.module, vae.module, "ambiguous-matrix", class_names=classifier.class_names,
                      chains=chains, warmup=iterations, samples=iterations, seed=0, executor=executor, shards=shards)

    def identify(executor, shards):
        if shards == 1 and not executor.distributed:
            return identify_failures(classifier.module, vae.module, images, labels, samples_per_image=per_image)
        pieces = split_evenly(len(images), shards)
        tasks = [ShardTask("probe_core.defuse.identify_step:identify_shard",
                           {"images": images[p.start:p.stop], "labels": labels[p.start:p.stop], "start": p.start,
                            "samples_per_image": per_image, "seed": shard_seed(0, i)},
                           {"classifier": classifier.module, "vae": vae.module}) for i, p in enumerate(pieces)]
        found = []
        executor.map(tasks, lambda index, value: found.append(value))
        return found

    times = {}
    times["matrix", "local"], local_matrix = timed(lambda: matrix(LocalShards(), 1))
    times["identify", "local"], _ = timed(lambda: identify(LocalShards(), 1))
    startup = {2: start_ray(2)}
    times["matrix", "ray"], ray_matrix = timed(lambda: matrix(RayShards(), 2))
    times["identify", "ray"], _ = timed(lambda: identify(RayShards(), 2))
    startup[1] = start_ray(1)
    times["matrix", "ray1"], _ = timed(lambda: matrix(RayShards(), 2))
    # two real-size classifiers, each in a new workspace per executor so that both train
    colour, _ = build_data(32, True, MNIST, Path(workspace.root) / "data")
    epochs = 1 if args.quick else 16  # the quick set's 400 images: 7 batches an epoch
    two = [ModelSpec(dataset=canonical_dataset_name(str(colour)), kind="classifier", epochs=epochs, seed=seed)
           for seed in (0, 1)]
    start_ray(2)
    times["train", "ray"], _ = timed(lambda: train_models(
        Workspace(tempfile.mkdtemp(prefix="probe-train-")).registry, two, "ray"))
    ray.shutdown()
    times["train", "local"], _ = timed(lambda: train_models(
        Workspace(tempfile.mkdtemp(prefix="probe-train-")).registry, two, "local"))

    reached = {name: sum(not t["failed"] for t in result["targets"])
               for name, result in (("local", local_matrix), ("ray", ray_matrix))}
    print(f"Ray against local on this machine's 2 cores (Ray's start, paid once per session: "
          f"{startup[2]:.1f} s, not counted)")
    print(f"  45-pair matrix ({chains} chains/pair, {iterations} + {iterations}): local {times['matrix', 'local']:.1f} s "
          f"({reached['local']}/45 pairs), ray 2 workers {times['matrix', 'ray']:.1f} s ({reached['ray']}/45 pairs): "
          f"ray / local = {times['matrix', 'ray'] / times['matrix', 'local']:.2f}")
    print(f"  identification ({len(images)} images, Q = {per_image}): local {times['identify', 'local']:.1f} s, "
          f"ray 2 workers {times['identify', 'ray']:.1f} s: "
          f"ray / local = {times['identify', 'ray'] / times['identify', 'local']:.2f}")
    print(f"  matrix with N single-threaded Ray workers: N = 1 {times['matrix', 'ray1']:.1f} s, "
          f"N = 2 {times['matrix', 'ray']:.1f} s (speed-up {times['matrix', 'ray1'] / times['matrix', 'ray']:.2f}x)")

    print(f"  two 32x32 classifiers ({epochs} epoch{'s' * (epochs != 1)} of the quick set's 400 images each): "
          f"one after another "
          f"{times['train', 'local']:.1f} s, at once on Ray {times['train', 'ray']:.1f} s: "
          f"ray / local = {times['train', 'ray'] / times['train', 'local']:.2f}")

    # The estimate: per-shard cost measured here, scaled by work; transfer sizes measured as pickled bytes.
    model_bytes = len(pickle.dumps({"classifier": classifier.module, "vae": vae.module}))
    per_target_s = times["matrix", "ray1"] / 45  # one worker did all 45 targets
    per_image_s = times["identify", "local"] / len(images)
    print("Estimate for 8 workers (assumptions: per-target and per-image cost as measured here on one CPU worker, "
          "times the work ratio; a GPU worker's speed-up over one CPU core is not measured here and is left as G):")
    print(f"  models sent once per worker: {model_bytes / 1e6:.2f} MB; per-target result about "
          f"{len(pickle.dumps(local_matrix['targets'][0])) / 1e3:.0f} kB plus stored samples")
    mnist_scale = (28 * 28) / (8 * 8)  # decoder and classifier cost grow about with the pixels
    matrix_8 = per_target_s * 45 * mnist_scale / 8
    identify_8 = per_image_s * 60_000 * (500 / per_image) * mnist_scale / 8
    print(f"  MNIST 45-pair matrix: about {matrix_8 / 60:.0f} min / G on 8 workers "
          f"({per_target_s:.1f} s per digits target x {mnist_scale:.0f} for 28x28 pixels)")
    print(f"  Defuse identification, 60,000 images, Q = 500: about {identify_8 / 60:.0f} min / G on 8 workers "
          f"({per_image_s * 1e3:.0f} ms per digits image at Q = {per_image})")


if __name__ == "__main__":
    main()
