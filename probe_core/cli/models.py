"""``probe models train|list|defaults``: the model zoo of the workspace."""

from __future__ import annotations

import argparse
import json
import sys

from probe_core.catalog import load_dataset
from probe_core.cli.common import format_metrics, workspace_from_args
from probe_core.data import DEFAULT_DATASET
from probe_core.data.classes import with_class_map
from probe_core.errors import ProbeError
from probe_core.models import KINDS, ModelSpec
from probe_core.models.checks import check_references
from probe_core.reporting.export import format_table
from probe_core.runs.progress import announce_training, progress_bar, say_training
from probe_core.runs.scaleout import parse_executor
from probe_core.runs.training import train_models


def _models_train(args: argparse.Namespace) -> int:
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
                     latent_dim=args.latent_dim, epochs=args.epochs, seed=args.seed, beta=args.beta,
                     kl_warmup=args.kl_warmup)
    registry = workspace.registry
    resolved = spec.resolved(load_dataset(spec.dataset_view(), args.data_dir))
    cached = registry.exists(resolved.model_id())
    loaded = registry.get_or_train(spec, progress_bar(f"{args.kind} on {spec.dataset_view()}"),
                                   device=args.device)
    verb = "already trained" if cached else "trained"
    print(f"{loaded.id}: {verb}; {format_metrics(loaded.metrics)}")
    if loaded.feature_network:
        print(f"its feature network is the classifier {loaded.feature_network} (a judge at no training cost: "
              f"--judge features:{loaded.id})")
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
    registry = workspace.registry.announcing(announce_training)  # each model's recipe is printed as it starts
    specs = registry.default_specs(args.dataset)
    reporter = None
    if parse_executor(args.executor).distributed:  # all at once: one bar over the models, their recipes said first
        for spec in specs:
            resolved = spec.resolved(load_dataset(spec.dataset_view(), registry.data_dir))
            if not registry.exists(resolved.model_id()):
                say_training(resolved, resolved.model_id(), f" with the {args.executor} executor")
        reporter = progress_bar(f"defaults of {args.dataset}")
    for loaded in train_models(registry, specs, args.executor, reporter, args.device):
        print(f"{loaded.id}: {format_metrics(loaded.metrics)}")
    # the defaults prove themselves on the data at once: a classifier near chance or a generator that is not
    # 'ok' is said here, with what to do, not at the first run
    report = check_references(workspace.registry, "default", args.dataset, "default", device=args.device)
    classifier, generator = report["classifier"], report["generator"]
    print(f"check: classifier {classifier['accuracy']:.1%} on {classifier['images']} test images "
          f"(chance {classifier['chance']:.1%}); generator {generator['verdict']}")
    for warning in filter(None, [None if classifier["usable"] else classifier["message"],
                                 report.get("generator_warning")]):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _models_check(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    classifier = with_class_map(args.classifier, args.class_map) if args.class_map else args.classifier
    if args.judge and not args.generator:
        raise ProbeError("--judge judges a generator's hits: give --generator too")
    report = check_references(workspace.registry, classifier, args.dataset, args.generator, device=args.device,
                              judge=args.judge)
    clf = report["classifier"]
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"classifier {clf['classifier']} on {report['dataset']}: accuracy {clf['accuracy']:.1%} on "
              f"{clf['images']} test images (chance {clf['chance']:.0%})")
        print("  class map (model = data set): " + ", ".join(f"{k}={v}" for k, v in clf["class_map"].items()))
        print("  per class: " + ", ".join(f"{k} {v:.0%}" for k, v in clf["per_class"].items()))
        if report["generator"] is not None:
            gen = report["generator"]
            figures = ", ".join(f"{k} {v}" for k, v in gen["figures"].items())
            print(f"generator {gen['generator']}: {gen['verdict']} ({figures})")
    if report.get("generator_warning"):
        print(f"warning: {report['generator_warning']}", file=sys.stderr)
    if not report["usable"]:
        raise ProbeError(clf["message"])
    return 0


def add_model_commands(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser("models", help="train and list models")
    sub = models.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="train a zoo model (returns the stored one if it exists)")
    train.add_argument("--dataset", default=DEFAULT_DATASET)
    train.add_argument("--kind", required=True, choices=list(KINDS))
    train.add_argument("--classes", type=lambda t: [p for p in t.split(",") if p], help="train on these classes only")
    train.add_argument("--exclude", type=lambda t: [p for p in t.split(",") if p], help="train without these classes")
    train.add_argument("--ambiguous", action="store_true", help="the always-ambiguous classifier variant")
    train.add_argument("--latent-dim", type=int)
    train.add_argument("--epochs", type=int)
    train.add_argument("--seed", type=int, help="training seed (default $PROBE_MODEL_SEED or 0)")
    train.add_argument("--beta", type=float, help="VAEs: the KL weight (a β-VAE for β > 1; default the data set's)")
    train.add_argument("--kl-warmup", type=int, help="VAEs: epochs over which the KL weight rises to β "
                                                     "(default half of the epochs)")
    train.set_defaults(handler=_models_train)
    listing = sub.add_parser("list", help="models in the workspace with their metrics")
    listing.add_argument("--dataset")
    listing.add_argument("--json", action="store_true", help="full metadata as JSON")
    listing.set_defaults(handler=_models_list)
    defaults = sub.add_parser("defaults", help="train the default classifier and generator of a data set (with "
                              "--executor ray, all at once, a CPU each)")
    defaults.add_argument("--dataset", default=DEFAULT_DATASET)
    defaults.set_defaults(handler=_models_defaults)
    check = sub.add_parser("check", help="check a classifier (and a generator) on a data set's test images, "
                           "training nothing: classes matched by name, accuracy, a generator's verdict")
    check.add_argument("--classifier", default="default", help="model id, 'default', a plugin .py or a model file "
                       "(.pt/.ts TorchScript, .pt2 torch.export) with its sidecar .json")
    check.add_argument("--dataset", default=DEFAULT_DATASET)
    check.add_argument("--generator", help="also check this generator (id, 'default', plugin or model file)")
    check.add_argument("--judge", help="with --generator: a classifier other than the probed one (id, 'default', "
                       "plugin or model file; 'features:GENERATOR', that generator's own feature network) that judges "
                       "a short high:C probe's hits; 'ok' then needs it to agree with half of them")
    check.add_argument("--class-map", help="MODEL_CLASS=DATA_CLASS,... where the classifier's class names differ "
                       "from the data set's")
    check.add_argument("--json", action="store_true", help="print the check as JSON")
    check.set_defaults(handler=_models_check)

