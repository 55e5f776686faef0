"""``probe sample|recipe|label``: Bayes-TrEx from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from probe_core.bayestrex import (
    LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS,
    MATRIX_SAMPLER_DEFAULTS,
    REAL_SIZE_SAMPLER_DEFAULTS,
    SAMPLER_DEFAULTS,
    SMALL_IMAGE_VALUES,
    label_test_image,
    recipes,
    table2,
)
from probe_core.bayestrex.compare import CompareRequest
from probe_core.bayestrex.recipes import prepare_sample
from probe_core.bayestrex.request import CHAIN_STARTS, SampleRequest
from probe_core.catalog import load_dataset
from probe_core.cli.common import workspace_from_args
from probe_core.data import DEFAULT_DATASET, REAL_SIZE_LABEL
from probe_core.errors import ProbeError
from probe_core.mcmc.driver import DEFAULT_INTEGRATION_STEPS, JUMPING_INTEGRATION_STEPS
from probe_core.reporting.export import npz_bytes, sample_arrays, write_file
from probe_core.runs.lifecycle import run_now
from probe_core.runs.requests import field_defaults
from probe_core.sampling.targets import spec_help
from probe_core.team.accounts import shell_annotator


def _run_prepared(args: argparse.Namespace, workspace, registry, prepared) -> int:
    """Shared by ``probe sample`` and ``probe recipe``: the prepared request run through the one lifecycle
    (:func:`~probe_core.runs.lifecycle.run_now`, as the API does), with a progress bar, then the table."""
    if prepared.warning:
        print(f"warning: {prepared.warning}", file=sys.stderr)
    # the same remembering registry: the run finds the models loaded and checked, and does not check them again
    run_id, result = run_now(registry, prepared.request, device=args.device, progress_bar="sampling")
    print(table2(result.targets))
    for target in result.targets:
        judged = target.get("judge_agreement")
        if judged and judged["judged"]:
            print(f"{target['spec']}: the judge {result.judge} puts {judged['agreed']} of {judged['judged']} hits "
                  f"({judged['share']:.0%}) in the target's classes")
    for target in result.targets:
        placed = target.get("provenance")
        if placed and placed["measured"]:
            print(f"{target['spec']}: {placed['near_copy_share']:.0%} of {placed['measured']:,} hits are near copies of "
                  f"a training image; their median distance to the nearest training image is "
                  f"{placed['median_ratio']:.2f}x a real test image's; {placed['distinct_nearest']:,} distinct nearest "
                  f"training images")
    for line in result.judge_warnings + result.provenance_warnings:
        print(f"warning: {line}", file=sys.stderr)
    for entry in result.not_done:
        print(f"warning: shard {entry['shard']} ({entry['covers']}) was not done: {entry['error']}", file=sys.stderr)
    print(f"{result.reached}/{len(result.targets)} targets reached in {result.wall_seconds:.1f} s; samples stored "
          f"as run {run_id} in {workspace.root}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({**result.to_record(with_samples=True), "run_id": run_id}, handle, indent=1)
    if args.npz:
        write_file(args.npz, npz_bytes(**sample_arrays(workspace.store.get_samples(run_id))))
    return 0


def _given_settings(args: argparse.Namespace) -> dict:
    """The sampler settings as given on the command line; None where the target's default applies."""
    return {"chains": args.chains, "warmup": args.warmup, "samples": args.samples, "sigma": args.sigma,
            "sampler": args.sampler, "seed": args.seed, "keep_every": args.keep_every, "init": args.init,
            "executor": args.executor, "shards": args.shards, "independence_moves": args.independence_moves,
            "allow_weak_classifier": args.allow_weak_classifier or None}


def _sample(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    registry = workspace.registry.remembering()  # validation and preparation load each model once
    # every setting is checked before anything is trained or stored; then the models are checked on the data
    request = SampleRequest.build(registry, dataset=args.dataset, target=args.target, classifier=args.classifier,
                                  generator=args.generator, class_map=args.class_map, judge=args.judge,
                                  **_given_settings(args))
    return _run_prepared(args, workspace, registry, prepare_sample(registry, request, args.device))


def _default_help(what: str, key: str) -> str:
    """An option's help with its defaults, read from the tables the runs use (never repeated by hand)."""
    return (f"{what} (default {SAMPLER_DEFAULTS[key]}, {REAL_SIZE_SAMPLER_DEFAULTS[key]} for your own data of "
            f"{REAL_SIZE_LABEL} and up; ambiguous-matrix: {MATRIX_SAMPLER_DEFAULTS[key]}, "
            f"{LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS[key]} for images of more than {SMALL_IMAGE_VALUES} values C·H·W)")


def _add_sampler_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--chains", type=int, help=_default_help("chains per target", "chains"))
    parser.add_argument("--warmup", type=int, help=_default_help("warm-up iterations", "warmup"))
    parser.add_argument("--samples", type=int, help=_default_help("samples per chain", "samples"))
    parser.add_argument("--sigma", type=float, default=0.05)
    parser.add_argument("--sampler", choices=["hmc", "nuts", "rwm"], default="hmc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init", choices=CHAIN_STARTS, default="auto", metavar="START",
                        help="where chains start: prior (the paper's), optimize, smc, uniform, classes (draws of the "
                        "target classes' parts of a generator's code density); auto (default) chooses: classes where "
                        "the generator has a code density, else smc for ambiguous and vector targets and optimize "
                        "for high ones")
    parser.add_argument("--keep-every", type=int,
                        help=_default_help("store every n-th sample in the workspace", "keep_every"))
    parser.add_argument("--independence-moves", type=int, default=0, metavar="N",
                        help="hmc: N independence Metropolis-Hastings jumps per iteration after warm-up, from a "
                        "mixture fitted to each target's warm-up draws, so chains move between modes; HMC's "
                        f"trajectories are then capped at {JUMPING_INTEGRATION_STEPS} leapfrog steps instead of "
                        f"{DEFAULT_INTEGRATION_STEPS} (default 0)")
    parser.add_argument("--allow-weak-classifier", action="store_true",
                        help="sample even with a classifier near chance on the data's test images (refused "
                        "otherwise); every result is then flagged")
    parser.add_argument("--shards", type=int, help="split the targets into this many shards, each with its own "
                        "seed (default: 1 with --executor local, one per worker with ray); the same --shards and "
                        "--seed give the same samples on every executor")
    parser.add_argument("--out", help="write the result as JSON")
    parser.add_argument("--npz", help="write stored latents, images and confidences as .npz")


def _recipe(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    registry = workspace.registry.remembering()  # preparation and the run load and check each model once
    if args.recipe == "compare":
        if not (args.classifier_a and args.classifier_b):
            raise ProbeError("compare needs --classifier-a and --classifier-b")
        run_id = recipes.compare_classifiers(registry, workspace.store, args.dataset, args.classifier_a,
                                              args.classifier_b, args.generator, chains=args.chains,
                                              warmup=args.warmup, samples=args.samples, seed=args.seed)
        to_label = recipes.samples_to_label(workspace.store, run_id)
        print(f"comparison stored as run {run_id}; {len(to_label)} samples to label, e.g.:")
        print(f"  probe label sample {to_label[0]['id']} --annotator YOU --label CLASS_YOU_SEE")
        print(f"then: probe recipe compare-report --run {run_id}")
        return 0
    if args.recipe == "compare-report":
        if args.run is None:
            raise ProbeError("compare-report needs --run RUN_ID")
        table = recipes.comparison_table(workspace.store, args.run)
        for classifier, row in table.items():
            overall = "n/a" if row["overall"] is None else f"{row['overall'] * 100:.1f}%"
            per_class = ", ".join(f"{k}: {v[0] * 100:.0f}% (n={v[1]})" for k, v in sorted(row["per_class"].items()))
            print(f"{classifier}: overall {overall} on {row['labelled']} labelled samples; {per_class}")
        return 0
    if args.recipe == "misclassification" and args.exclude is None:
        raise ProbeError("misclassification needs --exclude CLASS (the class the generator never sees)")
    if args.recipe != "misclassification" and args.classifier:
        raise ProbeError(f"{args.recipe} trains the classifier it needs; --classifier is for misclassification")
    # checked (and a wrong generator refused) before anything is trained or stored
    plan = recipes.plan_use_case(registry, args.dataset, args.recipe, excluded_class=args.exclude,
                                 classifier_classes=tuple(args.classes.split(",")) if args.classes else None,
                                 classifier=args.classifier, generator=args.generator)
    # the models it needs are trained (announced), then it runs as the same sample request as `probe sample`
    prepared = recipes.prepare_use_case(registry, plan, args.dataset, args.device, **_given_settings(args))
    return _run_prepared(args, workspace, registry, prepared)


def _label(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    args.annotator = shell_annotator(workspace.store, args.annotator)
    if args.what == "test-image":
        if args.failure is not None:
            raise ProbeError("a test image's verdict is --label mislabel or --label misclassification")
        label_id = label_test_image(workspace.store, load_dataset(args.dataset, args.data_dir), args.id,
                                    args.annotator, args.label)
        print(f"label {label_id} stored: test image {args.id} of {args.dataset} = {args.label!r} by {args.annotator}")
        return 0
    target = {"sample_id": args.id} if args.what == "sample" else {"cluster_id": args.id}
    label_id = workspace.store.set_label(args.annotator, label=args.label, is_failure=args.failure, **target)
    print(f"label {label_id} stored: {args.what} {args.id} = {args.label!r} by {args.annotator}")
    return 0


def add_sample_command(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("sample", help="Bayes-TrEx: sample inputs at a target confidence")
    parser.add_argument("--target", required=True,
                        help=f"{spec_help()}; classes by index or name, several targets separated by ';' "
                             "(e.g. ambiguous:4,9;high:7)")
    parser.add_argument("--classifier", default="default", help="model id, 'default' or a plugin .py")
    parser.add_argument("--generator", default="default", help="model id, 'default' (the data's: the VAE; on your own "
                        "data of 32x32 and up, 1,138 images or more, the spatial autoencoder with its flow prior) or a plugin .py")
    parser.add_argument("--class-map", help="MODEL_CLASS=DATA_CLASS,... where the classifier's class names differ "
                        "from the data set's (classes are matched by name, never by position)")
    parser.add_argument("--judge", metavar="MODEL",
                        help="a trained classifier other than the probed one, on the same classes (an id; "
                             "'features:default', the generator's own feature network, where it keeps one): it judges "
                             "each high or ambiguous target's hits, and a target whose hits it mostly puts elsewhere "
                             "is flagged (hits that fool only the probed classifier)")
    _add_sampler_options(parser)
    parser.set_defaults(handler=_sample)

    recipe = commands.add_parser("recipe", help="Bayes-TrEx use cases that train the models they need")
    recipe.add_argument("recipe", choices=["misclassification", "novel-class", "always-ambiguous", "compare",
                                           "compare-report"])
    recipe.add_argument("--exclude", help="misclassification: the class the generator is trained without")
    recipe.add_argument("--classes", help="novel-class: the classifier's classes (default 0,1,3,6,9)")
    recipe.add_argument("--classifier", help="misclassification, compare: classifier id or plugin (default: the "
                        "data set's default)")
    recipe.add_argument("--generator", help="gan (default, as in the paper) or vae: train the generator the use case "
                        "needs; or a stored generator id or plugin (compare: default, the data set's default)")
    compare_defaults = field_defaults(CompareRequest)
    recipe.add_argument("--classifier-a", help="compare: first classifier (a comparison's own defaults: "
                        f"{compare_defaults['chains']} chains per class, {compare_defaults['warmup']} warm-up "
                        f"iterations, {compare_defaults['samples']} samples per chain)")
    recipe.add_argument("--classifier-b", help="compare: second classifier")
    recipe.add_argument("--run", type=int, help="compare-report: the comparison run")
    _add_sampler_options(recipe)
    recipe.set_defaults(handler=_recipe)

    label = commands.add_parser("label", help="store a human label for a sample, a cluster or a test image")
    label.add_argument("what", choices=["sample", "cluster", "test-image"])
    label.add_argument("id", type=int, help="sample id, cluster id, or the test image's index")
    label.add_argument("--annotator", required=True)
    label.add_argument("--label", required=True, help="the class you see, or 'none' for none of the above; for a "
                       "test image: mislabel or misclassification")
    label.add_argument("--dataset", default=DEFAULT_DATASET, help="test-image: the data set")
    label.add_argument("--failure", action=argparse.BooleanOptionalAction, default=None,
                       help="whether it is a failure of the classifier")
    label.set_defaults(handler=_label)

