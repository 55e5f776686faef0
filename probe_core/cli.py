"""The ``probe`` command line: data sets, models, Bayes-TrEx sampling and (``probe_core.defuse.commands``) Defuse.

Each command group is a function that adds its sub-parsers; a handler gets the
parsed arguments and returns an exit code. Errors print one line, no traceback
(set ``PROBE_DEBUG=1`` for one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Sequence

from probe_core.errors import ProbeError

Handler = Callable[[argparse.Namespace], int]


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated class indices like 0,1,3, got {text!r}") from exc


def workspace_from_args(args: argparse.Namespace):
    from probe_core.workspace import Workspace

    return Workspace(args.workspace, data_dir=args.data_dir, on_training=announce_training)


def announce_training(spec, model_id: str):
    """Say on stderr which model is trained now and why, and return a progress bar for it."""
    print(f"{model_id} is not in the workspace yet: training it ({spec.kind} on {spec.dataset_view()}, "
          f"{spec.epochs} epochs)", file=sys.stderr)
    return _progress_bar(f"{spec.kind} on {spec.dataset_view()}")


def format_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def format_metrics(metrics: dict) -> str:
    """Short human form of a model's metrics."""
    parts = []
    if "test_accuracy" in metrics:
        parts.append(f"test acc {metrics['test_accuracy'] * 100:.1f}%")
    if "test_elbo" in metrics:
        parts.append(f"ELBO {metrics['test_elbo']:.1f}")
    if "test_reconstruction_mse" in metrics:
        parts.append(f"recon MSE {metrics['test_reconstruction_mse']:.4f}")
    if "fd_classifier_features" in metrics:
        parts.append(f"FD-clf {metrics['fd_classifier_features']:.1f}")
    return ", ".join(parts)


# --- data -----------------------------------------------------------------------------

def _data_list(args: argparse.Namespace) -> int:
    from probe_core.data import list_datasets, load_dataset

    rows = []
    for info in list_datasets():
        if info.needs_folder:
            try:
                status = f"ready ({load_dataset(info.name, args.data_dir).source.split(':')[0]})"
            except ProbeError:
                status = "needs --data-dir or PROBE_DATA_DIR"
        else:
            status = "ready (embedded)"
        rows.append([info.name, info.description, status])
    print(format_table(rows, ["name", "description", "status"]))
    return 0


def _data_info(args: argparse.Namespace) -> int:
    from probe_core.data import load_dataset

    dataset = load_dataset(args.name, args.data_dir)
    counts = lambda labels: ", ".join(  # noqa: E731
        f"{dataset.class_names[c]}: {int((labels == c).sum())}" for c in range(dataset.num_classes)
    )
    print(f"{dataset.name}: {dataset.source}")
    print(f"image shape (C, H, W): {dataset.image_shape}")
    print(f"classes ({dataset.num_classes}): {', '.join(dataset.class_names)}")
    print(f"train: {len(dataset.train_labels)} images ({counts(dataset.train_labels)})")
    print(f"test:  {len(dataset.test_labels)} images ({counts(dataset.test_labels)})")
    return 0


def add_data_commands(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="list and inspect data sets")
    sub = data.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="data sets and whether they can be loaded").set_defaults(handler=_data_list)
    info = sub.add_parser("info", help="shape, classes, split and counts of one data set")
    info.add_argument("name", help="e.g. digits, mnist, fashion-mnist, idx, digits[drop=5]")
    info.set_defaults(handler=_data_info)


# --- models ---------------------------------------------------------------------------

def _progress_bar(description: str):
    from tqdm import tqdm

    bar = {"bar": None}

    def update(progress) -> None:
        if bar["bar"] is None:
            bar["bar"] = tqdm(total=progress.epochs, desc=description, unit="epoch", file=sys.stderr)
        bar["bar"].set_postfix(loss=f"{progress.loss:.4g}", **{progress.metric_name: f"{progress.metric:.4g}"})
        bar["bar"].update(progress.epoch - bar["bar"].n)
        if progress.epoch == progress.epochs:
            bar["bar"].close()

    return update


def _models_train(args: argparse.Namespace) -> int:
    from probe_core.data import load_dataset
    from probe_core.models import ModelSpec

    workspace = workspace_from_args(args)
    dataset = load_dataset(args.dataset, args.data_dir)
    if args.classes and args.exclude:
        raise ProbeError("give --classes or --exclude, not both")
    classes = None
    if args.classes:
        classes = [dataset.class_index(c) for c in args.classes]
    elif args.exclude:
        excluded = {dataset.class_index(c) for c in args.exclude}
        classes = [c for c in range(dataset.num_classes) if c not in excluded]
    spec = ModelSpec(dataset=args.dataset, kind=args.kind, classes=classes, ambiguous=args.ambiguous,
                     latent_dim=args.latent_dim, epochs=args.epochs, seed=args.seed)
    registry = workspace.registry
    resolved = spec.resolved(load_dataset(spec.dataset_view(), args.data_dir))
    cached = registry.exists(resolved.model_id())
    loaded = registry.get_or_train(spec, progress=_progress_bar(f"{args.kind} on {spec.dataset_view()}"),
                                   device=args.device)
    verb = "already trained" if cached else "trained"
    print(f"{loaded.id}: {verb}; {format_metrics(loaded.metrics)}")
    return 0


def _models_list(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    models = workspace.registry.list(dataset=args.dataset)
    if args.json:
        print(json.dumps(models, indent=2))
        return 0
    if not models:
        print(f"no models in {workspace.root} yet: try `probe models train --kind classifier`")
        return 0
    rows = [[m["id"], m["kind"], m["spec"].get("dataset_view", m["dataset"]), format_metrics(m["metrics"])]
            for m in models]
    print(format_table(rows, ["id", "kind", "data", "metrics"]))
    return 0


def _models_defaults(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    for spec in workspace.registry.default_specs(args.dataset):
        loaded = workspace.registry.get_or_train(spec, progress=_progress_bar(f"{spec.kind} on {args.dataset}"),
                                                 device=args.device)
        print(f"{loaded.id}: {format_metrics(loaded.metrics)}")
    return 0


def add_model_commands(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser("models", help="train and list models")
    sub = models.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="train a zoo model (returns the stored one if it exists)")
    train.add_argument("--dataset", default="digits")
    train.add_argument("--kind", required=True, choices=["classifier", "vae", "gan"])
    train.add_argument("--classes", type=lambda t: [p for p in t.split(",") if p], help="train on these classes only")
    train.add_argument("--exclude", type=lambda t: [p for p in t.split(",") if p], help="train without these classes")
    train.add_argument("--ambiguous", action="store_true", help="the always-ambiguous classifier variant")
    train.add_argument("--latent-dim", type=int)
    train.add_argument("--epochs", type=int)
    train.add_argument("--seed", type=int, help="training seed (default $PROBE_MODEL_SEED or 0)")
    train.set_defaults(handler=_models_train)
    listing = sub.add_parser("list", help="models in the workspace with their metrics")
    listing.add_argument("--dataset")
    listing.add_argument("--json", action="store_true", help="full metadata as JSON")
    listing.set_defaults(handler=_models_list)
    defaults = sub.add_parser("defaults", help="train the default classifier, VAE and GAN of a data set")
    defaults.add_argument("--dataset", default="digits")
    defaults.set_defaults(handler=_models_defaults)


# --- sample ---------------------------------------------------------------------------

def _sampling_run(args: argparse.Namespace, workspace, config: dict, run: Callable[..., dict]) -> int:
    """Shared by ``probe sample`` and ``probe recipe``: a stored run, a progress bar, the summary table.

    ``run(store=, run_id=, progress=)`` does the sampling and returns the result dict.
    """
    from tqdm import tqdm

    from probe_core.bayestrex import table2
    from probe_core.jobs import JobContext

    store = workspace.store
    run_id = store.create_run("sample", config)
    store.start_run(run_id)
    context = JobContext(store, run_id)
    bar = tqdm(total=args.warmup + args.samples, desc="sampling", unit="it", file=sys.stderr)

    def on_progress(p) -> None:
        bar.update(p.iteration - bar.n)
        bar.set_postfix(stage=p.stage, accept=f"{float(p.acceptance.mean()):.2f}", sigma=f"{p.sigma:.3g}")
        context.report(p.iteration / p.total, f"{p.stage} {p.iteration}/{p.total}",
                       {"acceptance": float(p.acceptance.mean()), "step_size": float(p.step_size.median())})

    try:
        result = run(store=store, run_id=run_id, progress=on_progress)
    except KeyboardInterrupt:
        store.finish_run(run_id, "cancelled")
        raise
    except Exception as exc:
        store.finish_run(run_id, "failed", error=str(exc))
        raise
    finally:
        bar.close()
    result["run_id"] = run_id
    summary = {k: v for k, v in result.items() if k != "targets"}
    summary["targets"] = [{k: v for k, v in t.items() if k != "samples"} for t in result["targets"]]
    store.finish_run(run_id, "done", result=summary)
    print(table2(result))
    print(f"{sum(not t['failed'] for t in result['targets'])}/{len(result['targets'])} targets reached in "
          f"{result['wall_seconds']:.1f} s; samples stored as run {run_id} in {workspace.root}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
    if args.npz:
        _write_npz(args.npz, store.get_samples(run_id))
    return 0


def _write_npz(path: str, stored: list[dict]) -> None:
    import numpy as np

    if not stored:
        raise ProbeError("no samples were stored, nothing to write to .npz")
    np.savez_compressed(path, z=np.stack([s["z"] for s in stored]),
                        confidences=np.stack([s["confidences"] for s in stored]),
                        images=np.stack([s["image"] for s in stored]),
                        target_index=np.array([s["target_index"] for s in stored]),
                        chain=np.array([s["chain"] for s in stored]), hit=np.array([bool(s["hit"]) for s in stored]))


def _sampler_kwargs(args: argparse.Namespace) -> dict:
    return {"chains": args.chains, "warmup": args.warmup, "samples": args.samples, "sigma": args.sigma,
            "sampler": args.sampler, "seed": args.seed, "keep_every": args.keep_every}


def _sample(args: argparse.Namespace) -> int:
    from probe_core.bayestrex import check_sampler_settings
    from probe_core.data import load_dataset
    from probe_core.targets import parse_targets
    from probe_core.usecases import probe_target

    workspace = workspace_from_args(args)
    registry = workspace.registry
    # everything is checked before a run is stored: models, target spec, sampler settings
    classifier = registry.resolve(args.classifier, "classifier", args.dataset, device=args.device)
    generator = registry.resolve(args.generator, "generator", args.dataset, device=args.device)
    parse_targets(args.target, classifier.class_names or load_dataset(args.dataset, args.data_dir).class_names)
    check_sampler_settings(**_sampler_kwargs(args))
    config = {"dataset": args.dataset, "classifier": classifier.id, "generator": generator.id,
              "target": args.target, **_sampler_kwargs(args)}
    return _sampling_run(args, workspace, config, lambda **kw: probe_target(
        registry, args.dataset, args.target, classifier.id, generator.id, **_sampler_kwargs(args), **kw))


def _add_sampler_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--chains", type=int, default=64, help="chains per target")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--sigma", type=float, default=0.05)
    parser.add_argument("--sampler", choices=["hmc", "nuts", "rwm"], default="hmc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-every", type=int, default=1, help="store every n-th sample in the workspace")
    parser.add_argument("--out", help="write the result as JSON")
    parser.add_argument("--npz", help="write stored latents, images and confidences as .npz")


def _recipe(args: argparse.Namespace) -> int:
    from probe_core import usecases

    from probe_core.bayestrex import check_sampler_settings

    workspace = workspace_from_args(args)
    registry = workspace.registry
    kwargs = _sampler_kwargs(args)
    check_sampler_settings(**kwargs)
    if args.recipe == "compare":
        if not (args.classifier_a and args.classifier_b):
            raise ProbeError("compare needs --classifier-a and --classifier-b")
        run_id = usecases.compare_classifiers(registry, workspace.store, args.dataset, args.classifier_a,
                                              args.classifier_b, args.generator, chains=args.chains,
                                              warmup=args.warmup, samples=args.samples, seed=args.seed)
        to_label = usecases.samples_to_label(workspace.store, run_id)
        print(f"comparison stored as run {run_id}; {len(to_label)} samples to label, e.g.:")
        print(f"  probe label sample {to_label[0]['id']} --annotator YOU --label CLASS_YOU_SEE")
        print(f"then: probe recipe compare-report --run {run_id}")
        return 0
    if args.recipe == "compare-report":
        if args.run is None:
            raise ProbeError("compare-report needs --run RUN_ID")
        table = usecases.comparison_table(workspace.store, args.run)
        for classifier, row in table.items():
            overall = "n/a" if row["overall"] is None else f"{row['overall'] * 100:.1f}%"
            per_class = ", ".join(f"{k}: {v[0] * 100:.0f}% (n={v[1]})" for k, v in sorted(row["per_class"].items()))
            print(f"{classifier}: overall {overall} on {row['labelled']} labelled samples; {per_class}")
        return 0
    if args.recipe == "misclassification":
        if args.exclude is None:
            raise ProbeError("misclassification needs --exclude CLASS (the class the generator never sees)")
        run = lambda **kw: usecases.high_confidence_misclassification(  # noqa: E731
            registry, args.dataset, args.exclude, args.classifier, **kwargs, **kw)
    else:
        classes = tuple(args.classes.split(",")) if args.classes else (0, 1, 3, 6, 9)
        run = lambda **kw: usecases.novel_class_extrapolation(  # noqa: E731
            registry, args.dataset, classes, **kwargs, **kw)
    return _sampling_run(args, workspace, {"recipe": args.recipe, "dataset": args.dataset, **kwargs}, run)


def _label(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    target = {"sample_id": args.id} if args.what == "sample" else {"cluster_id": args.id}
    label_id = workspace.store.set_label(args.annotator, label=args.label, is_failure=args.failure, **target)
    print(f"label {label_id} stored: {args.what} {args.id} = {args.label!r} by {args.annotator}")
    return 0


def add_sample_command(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("sample", help="Bayes-TrEx: sample inputs at a target confidence")
    parser.add_argument("--target", required=True,
                        help="high:3 | ambiguous:4,9 | uniform | probs:8=0.7,9=0.3 | path:8->9:11 | ambiguous-matrix")
    parser.add_argument("--classifier", default="default", help="model id, 'default' or a plugin .py")
    parser.add_argument("--generator", default="default", help="model id, 'default' (the VAE) or a plugin .py")
    _add_sampler_options(parser)
    parser.set_defaults(handler=_sample)

    recipe = commands.add_parser("recipe", help="Bayes-TrEx use cases that train the models they need")
    recipe.add_argument("recipe", choices=["misclassification", "novel-class", "compare", "compare-report"])
    recipe.add_argument("--exclude", help="misclassification: the class the generator is trained without")
    recipe.add_argument("--classes", help="novel-class: the classifier's classes (default 0,1,3,6,9)")
    recipe.add_argument("--classifier", help="classifier id or plugin (default: the data set's default)")
    recipe.add_argument("--generator", help="generator id or plugin (default: the data set's default VAE)")
    recipe.add_argument("--classifier-a", help="compare: first classifier")
    recipe.add_argument("--classifier-b", help="compare: second classifier")
    recipe.add_argument("--run", type=int, help="compare-report: the comparison run")
    _add_sampler_options(recipe)
    recipe.set_defaults(handler=_recipe)

    label = commands.add_parser("label", help="store a human label for a sample or a cluster")
    label.add_argument("what", choices=["sample", "cluster"])
    label.add_argument("id", type=int)
    label.add_argument("--annotator", required=True)
    label.add_argument("--label", required=True, help="the class you see, or 'none' for none of the above")
    label.add_argument("--failure", action=argparse.BooleanOptionalAction, default=None,
                       help="whether it is a failure of the classifier")
    label.set_defaults(handler=_label)


# --- runs -----------------------------------------------------------------------------

def _stamp(seconds: float | None) -> str:
    import time

    return "" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _runs(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    runs = workspace.store.list_runs(kind=args.kind, limit=args.limit)
    if args.json:
        print(json.dumps([{"id": r.id, "kind": r.kind, "status": r.status, "progress": r.progress,
                           "message": r.message, "error": r.error, "config": r.config, "created_at": r.created_at,
                           "started_at": r.started_at, "finished_at": r.finished_at, "updated_at": r.updated_at}
                          for r in runs], indent=1))
        return 0
    if not runs:
        print(f"no runs in {workspace.root} yet")
        return 0
    rows = [[str(r.id), r.kind, r.status, f"{r.progress * 100:.0f}%", _stamp(r.started_at or r.created_at),
             _stamp(r.finished_at), (r.error or r.message or "")[:70]] for r in runs]
    print(format_table(rows, ["id", "kind", "status", "progress", "started", "ended", "message"]))
    return 0


def add_runs_command(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("runs", help="every run in the workspace: kind, status, progress, start and end")
    parser.add_argument("--kind", help="only runs of this kind (sample, train, defuse-identify, ...)")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="as JSON, with each run's configuration")
    parser.set_defaults(handler=_runs)


COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_data_commands, add_model_commands, add_sample_command, add_runs_command,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="probe", description="Model Probe: find and fix how image classifiers fail.")
    parser.add_argument("--workspace", help="workspace folder (default $PROBE_WORKSPACE or ./workspace)")
    parser.add_argument("--data-dir", help="folder with IDX data sets (default $PROBE_DATA_DIR)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    commands = parser.add_subparsers(dest="command", required=True)
    from probe_core.defuse.commands import add_defuse_commands  # imports probe_core.cli's helpers
    from probe_core.scenes.commands import add_scene_commands

    for add in [*COMMAND_GROUPS, add_defuse_commands, add_scene_commands]:
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``probe`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from probe_core.workspace import resolve_device

        args.device = str(resolve_device(args.device))
        return int(args.handler(args) or 0)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # last resort: one line, the traceback only on request
        if os.environ.get("PROBE_DEBUG"):
            raise
        print(f"error: unexpected {type(exc).__name__}: {exc} (set PROBE_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
