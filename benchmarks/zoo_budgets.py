"""Zoo generators at real size: sample quality against training time, to choose the defaults by measurement.

Run: ``.venv/bin/python benchmarks/zoo_budgets.py --dataset mnist --data-dir ../shared/data/mnist-t10k
[--epochs 15,30,60] [--betas 1,4] [--gan-epochs 15,30] [--jobs 1] [--quick]``

For each VAE (epochs × β) and GAN (epochs) it trains the model from scratch in its own process (one
model per process, ``--threads`` torch threads each; ``--jobs`` processes at once, each pinned to its
own cores where the machine has enough), then prints:

- training seconds (wall, in that process);
- FD-clf: Fréchet distance between generated and real test images on the default classifier's
  penultimate features (lower is better; see the README);
- the ambiguity matrix: how many of the K(K-1)/2 pairs Bayes-TrEx reaches (at least one hit) and by at
  least two chains, with the matrix's own defaults for the data set's image size (``matrix_sampler_defaults``,
  as ``probe sample --target ambiguous-matrix`` uses them) unless ``--matrix-chains`` and friends say
  otherwise, and the matrix's wall seconds (on ``--matrix-device``).

The default classifier of the data set is trained first (it scores every generator). ``--quick`` trains
1-epoch models (one VAE, one GAN) and runs a 2-chain, 3 + 3 matrix (a smoke run, not the figures).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import time

import torch

from probe_core.bayestrex import matrix_sampler_defaults, sample
from probe_core.catalog import load_dataset
from probe_core.models import ModelSpec
from probe_core.models.spec import FD_METRIC
from probe_core.runs.workspace import Workspace
from quick_models import quick_generator_spec


def _take_slot(slots, cores: list[int], threads: int) -> None:
    """Pin this worker process, once when it starts, to the next free share of ``cores``."""
    slot = slots.get()
    if len(cores) >= (slot + 1) * threads:
        os.sched_setaffinity(0, cores[slot * threads:(slot + 1) * threads])
    torch.set_num_threads(threads)


def measure(args: argparse.Namespace, spec: ModelSpec) -> dict:
    """Train one generator (timed), then score it: FD-clf and the ambiguity matrix."""
    registry = Workspace(args.workspace, data_dir=args.data_dir).registry
    classifier = registry.get_or_train(ModelSpec(dataset=args.dataset, kind="classifier"))
    generator = registry.get_or_train(spec)
    if args.matrix_device != "cpu":  # trained on the CPU (timed), sampled where asked
        classifier = registry.load(classifier.id, args.matrix_device)
        generator = registry.load(generator.id, args.matrix_device)
    settings = matrix_sampler_defaults(load_dataset(args.dataset, args.data_dir).image_shape)
    settings.update({key: value for key, value in (("chains", args.matrix_chains), ("warmup", args.matrix_warmup),
                                                   ("samples", args.matrix_samples)) if value is not None})
    started = time.perf_counter()
    result = sample(classifier.module, generator.module, "ambiguous-matrix", class_names=classifier.class_names,
                    chains=settings["chains"], warmup=settings["warmup"], samples=settings["samples"],
                    keep_every=settings["keep_every"])
    targets = result["targets"]
    return {"id": generator.id, "kind": spec.kind, "epochs": generator.record["spec"]["epochs"],
            "beta": generator.record["spec"].get("beta") or 1.0,
            "train_seconds": generator.metrics["train_seconds"], "fd": generator.metrics[FD_METRIC],
            "pairs": sum(not t["failed"] for t in targets),
            "pairs_two_chains": sum(t["summary"]["chains_with_hits"] >= 2 for t in targets),
            "all_pairs": len(targets), "matrix_seconds": time.perf_counter() - started, "matrix": settings}


def _numbers(text: str, kind=int) -> list:
    return [kind(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", default="15,30,60", help="VAE epochs to compare")
    parser.add_argument("--betas", default="1,4", help="VAE β values to compare")
    parser.add_argument("--gan-epochs", default="15,30", help="GAN epochs to compare ('' for none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="models measured at once, each in its own process")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (and cores) per process")
    parser.add_argument("--matrix-chains", type=int)
    parser.add_argument("--matrix-warmup", type=int)
    parser.add_argument("--matrix-samples", type=int)
    parser.add_argument("--matrix-device", default="cpu", help="where the matrices sample (training is on the CPU)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.betas, args.gan_epochs = "1", "1", "1"
        args.matrix_chains, args.matrix_warmup, args.matrix_samples = 2, 3, 3
    specs = [ModelSpec(dataset=args.dataset, kind="vae", epochs=epochs, beta=beta, seed=args.seed)
             for epochs in _numbers(args.epochs) for beta in _numbers(args.betas, float)]
    specs += [ModelSpec(dataset=args.dataset, kind="gan", epochs=epochs, seed=args.seed)
              for epochs in _numbers(args.gan_epochs)]
    if args.quick:  # the generators the other quick modes reuse (quick_models.py)
        specs = [quick_generator_spec(args.dataset, kind) for kind in ("vae", "gan")]
    cores = sorted(os.sched_getaffinity(0))  # the workers split these among them
    torch.set_num_threads(args.threads)
    Workspace(args.workspace, data_dir=args.data_dir).registry.get_or_train(
        ModelSpec(dataset=args.dataset, kind="classifier", seed=args.seed))  # once, before the processes share it
    started = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")  # a forked child of a process that ran torch can hang
    slots = spawn.Queue()
    for slot in range(args.jobs):  # one per worker process: tasks of unequal length never share cores
        slots.put(slot)
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs, mp_context=spawn, initializer=_take_slot,
                                                initargs=(slots, cores, args.threads)) as pool:
        futures = [pool.submit(measure, args, spec) for spec in specs]
        rows = [future.result() for future in futures]
    matrix = rows[0]["matrix"]
    print(f"{args.dataset}: zoo generators by training budget ({args.threads} torch threads per model, {args.jobs} "
          f"at once; matrix {matrix['chains']} chains per pair, {matrix['warmup']} + {matrix['samples']}; "
          f"{time.perf_counter() - started:.0f} s in all)")
    print(f"{'kind':<5}{'epochs':>7}{'β':>5}{'train s':>9}{'FD-clf':>9}{'pairs':>8}{'≥2 chains':>11}{'matrix s':>10}  id")
    for row in rows:
        print(f"{row['kind']:<5}{row['epochs']:>7}{row['beta']:>5g}{row['train_seconds']:>9.0f}{row['fd']:>9.1f}"
              f"{row['pairs']:>5}/{row['all_pairs']:<2}{row['pairs_two_chains']:>11}{row['matrix_seconds']:>10.0f}  "
              f"{row['id']}", flush=True)


if __name__ == "__main__":
    main()
