"""``probe defuse identify|distill|label|correct|run|runs``: Defuse from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from probe_core.cli.common import workspace_from_args
from probe_core.data import DEFAULT_DATASET, REAL_SIZE_LABEL
from probe_core.defuse import correct_step
from probe_core.defuse import correction
from probe_core.defuse import labels as label_tools
from probe_core.defuse import queries
from probe_core.defuse import review as defuse_review
from probe_core.defuse import steps
from probe_core.defuse.cluster import (MIN_CLASS_REGION, PROJECT_CODES_ABOVE, PROJECTED_CODE_SIZE, REAL_SIZE_REVIEW_TAU,
                                      REVIEW_TAU)
from probe_core.defuse.identification import DEFAULT_JUDGE_SURE, NOISE_MODES, REAL_SIZE_NOISE, SMALL_IMAGE_NOISE
from probe_core.errors import ProbeError
from probe_core.models.neighbours import NEIGHBOUR_MAJORITY
from probe_core.reporting.export import format_table, write_file
from probe_core.reporting.render import image_grid, png_bytes, upscale_for_display
from probe_core.runs import history
from probe_core.team.accounts import shell_annotator


def _run_step(args, registry, settings, description: str) -> tuple:
    return steps.run_step(registry, registry.store, settings, args.device, progress_bar=description)


def _class_names(workspace, run_id: int, data_dir) -> tuple[str, ...]:
    return queries.run_class_names(workspace.store, run_id, data_dir)


def _oracle(args) -> str | None:
    """The oracle's model reference from ``--auto-label oracle:MODEL`` (None without it), its abstention
    threshold checked too: called before any work."""
    if not args.auto_label:
        if args.oracle_abstains_below is not None:
            raise ProbeError("--oracle-abstains-below goes with --auto-label oracle:MODEL")
        return None
    kind, _, oracle = args.auto_label.partition(":")
    if kind != "oracle" or not oracle:
        raise ProbeError(f"--auto-label wants oracle:MODEL_OR_PLUGIN, got {args.auto_label!r}")
    defuse_review.check_abstain_threshold(args.oracle_abstains_below)
    return oracle


def _add_oracle_options(parser) -> None:
    parser.add_argument("--oracle-abstains-below", type=float, metavar="P",
                        help="with --auto-label: the oracle answers 'none of the above' for a review image it is "
                             "less than P sure of, as an annotator would for a blur (default: it always names a "
                             "class)")


def _identify_settings(args) -> dict:
    return dict(
        dataset=args.dataset, classifier=args.classifier, class_map=args.class_map, vae=args.vae,
        samples_per_image=args.samples_per_image, max_per_image=args.max_per_image, noise=args.noise, a=args.a,
        b=args.b, noise_scale=args.noise_scale, seed=args.seed, max_images=args.max_images, executor=args.executor,
        shards=args.shards, allow_weak_classifier=args.allow_weak_classifier, judge=args.judge,
        judge_sure=args.judge_sure)


def _print_identify(run_id: int, result, class_names: tuple[str, ...]) -> None:
    by_class = ", ".join(f"{class_names[c]}: {n}" for c, n in enumerate(result.failures_by_prediction) if n)
    print(f"{result.failures} failures from {result.images_with_failures} of {result.images} training "
          f"images in {result.seconds:.1f} s (run {run_id}); predicted as {by_class or 'nothing'}")
    if result.judge:
        print(f"each confirmed by the judge {result.judge}: its source class at least {result.judge_sure:g} sure")
    if result.judge_reason:
        print(f"judge: {result.judge_reason}")
    if result.confirmed_words:
        print(result.confirmed_words)
    if result.judge_warning:
        print(f"warning: {result.judge_warning}")
    for entry in result.not_done:
        print(f"warning: shard {entry['shard']} ({entry['covers']}) was not done: {entry['error']}")
    if result.generator_weak:
        print(f"warning: {result.generator_warning}", file=sys.stderr)


def _print_clusters(workspace, distill_run: int, class_names: tuple[str, ...], source: str, rho: float) -> None:
    rows = []
    table = label_tools.cluster_label_table(workspace.store, distill_run, class_names, source, rho)
    for r in table:
        failure = "-" if r["is_failure"] is None else ("yes" if r["is_failure"] else "no")
        agreement = "-" if r["agreement"] is None else f"{r['agreement'] * 100:.0f}%"
        if r["agreement_se"] is not None:
            agreement += f" ±{r['agreement_se'] * 100:.0f}"
        images = (f"{r['images_disagreeing']}/{r['images_decided']} of {r['images_labelled']}"
                  if r["labelled_per"] == "image" else ("whole cluster" if r["labelled_per"] else "-"))
        rows.append([r["id"], r["cluster_index"], f"{r['weight']:.3f}", r["size"],
                     f"{class_names[r['majority_prediction']]} ({r['prediction_share'] * 100:.0f}%)",
                     f"{class_names[r['majority_true_label']]} ({r['true_label_share'] * 100:.0f}%)",
                     images, failure, r["label"] or "-", agreement, r["annotators"],
                     {True: "yes", False: "NOT RECOGNISABLE"}.get(r.get("recognisable"), "-")])

    print(format_table(rows, ["id", "#", "weight", "size", "predicted", "true label", "images wrong/decided",
                              "failure", "label", "agreement", "annotators", "recognisable"]))
    unrecognised = [r for r in table if r.get("recognisable") is False]
    if unrecognised:
        print(f"{len(unrecognised)} of {len(table)} regions are not recognisable: their judge "
              f"{unrecognised[0]['recognised_by']} calls no one class in most of their review images (blurs the "
              "generator made); an oracle abstains on them, and a fix of them is a fix of nothing a person could see")
    summary = label_tools.agreement_summary(table)
    if summary["clusters_labelled"]:
        def shown(part: dict) -> str:
            if part["mean"] is None:
                return "-"
            return f"{part['mean'] * 100:.0f}%" + ("" if part["se"] is None else f" ±{part['se'] * 100:.1f}")
        print(f"agreement per image (mean ± standard error): failure regions {shown(summary['failure_regions'])}, "
              f"other clusters {shown(summary['other_clusters'])}, all {shown(summary['all'])}")


def _print_results(result) -> None:
    """A :class:`~probe_core.defuse.results.CorrectionResult` as the before/after/baseline table."""
    rows = []
    baseline_kind = result.results["baseline"].get("kind", "cluster-labels")
    for name, title in (("before", "before"), ("defuse", "Defuse"), ("baseline", f"baseline ({baseline_kind})")):
        entry = result.results[name]
        chosen = f"λ={entry['lambda']:g}" if "lambda" in entry else ""
        rows.append([title, f"{entry['test_accuracy'] * 100:.1f}%", f"{entry['failure_accuracy'] * 100:.1f}%", chosen])
    print(format_table(rows, ["classifier", "test accuracy", "failure-region accuracy", "selected"]))
    print(f"selected: {result.selection['description']}"
          + (f"; validation: {result.selection['validation_description']}" if "validation" in result.selection else ""))
    if result.budget:
        print(f"swept: {result.budget}")
    print(f"corrected classifier registered as {result.corrected_model} (the original "
          f"{result.original_model} is kept); {len(result.regions)} failure regions, {result.seconds:.1f} s")
    if result.recognisable_words:
        print(result.recognisable_words)


def _identify(args) -> int:

    workspace = workspace_from_args(args)
    registry = workspace.registry.remembering()  # the request's checks and the run load each model once
    settings = steps.IdentifyRequest.build(registry, device=args.device, train_missing=True,
                                           **_identify_settings(args))
    run_id, result = _run_step(args, registry, settings, "identify")
    _print_identify(run_id, result, tuple(result.class_names))
    print(f"next: probe defuse distill --run {run_id}")
    return 0


def _distill_options(args) -> dict:
    """The distillation settings the command line gives (all but the identification run)."""
    return {"n_components": args.components, "weight_threshold": args.threshold, "max_samples": args.max_samples,
            "tau": args.tau, "seed": args.seed, "projection_dim": args.projection, "class_share": args.class_share}


def _print_distilled(run_id: int, result) -> None:
    """A distillation's counts, and what it chose beyond the papers' mixture."""
    choices = ([f"fitted in the codes' first {result.projection_dim} principal components"] if result.projection_dim
               else []) + ([f"clusters lighter than ε kept where they hold {result.class_share:.0%} of one class's "
                            "failures"] if result.class_share else [])
    print(f"{result.clusters} clusters kept from {result.failures} failures in {result.seconds:.1f} s "
          f"(run {run_id})" + (f"; {'; '.join(choices)}" if choices else ""))


def _distill(args) -> int:

    workspace = workspace_from_args(args)
    request = steps.DistillRequest.build(workspace.registry, identify_run=args.run, **_distill_options(args))
    run_id, result = _run_step(args, workspace.registry, request, "distill")
    _print_distilled(run_id, result)
    _print_clusters(workspace, run_id, _class_names(workspace, run_id, args.data_dir), label_tools.HUMAN,
                    label_tools.DEFAULT_RHO)
    print(f"next: label clusters, e.g. probe defuse label --run {run_id} --cluster ID --annotator YOU "
          f"--label CLASS (add --preview ID.png to see a cluster first)")
    return 0


def _label(args) -> int:

    workspace = workspace_from_args(args)
    store = workspace.store
    history.require_run(store, args.run, queries.DISTILL)
    class_names = _class_names(workspace, args.run, args.data_dir)
    source, oracle = args.source, _oracle(args)
    if args.preview:
        _write_preview(workspace, args)
    if args.novelty:
        _write_novelty(workspace, args, class_names)
    if args.sources:
        _write_sources(workspace, args, class_names)
    if oracle is not None:
        source, written = defuse_review.auto_label(workspace.registry, store, args.run, oracle,
                                                   rho=args.rho, device=args.device,
                                                   abstain_below=args.oracle_abstains_below)
        print(f"{len(written)} clusters labelled by the oracle (stored as {source}; human labels untouched)")
    if args.cluster is not None and (args.label is not None or args.failure is not None):
        _label_images(workspace, args, class_names)
    elif args.cluster is not None and args.preview is None and args.novelty is None and args.sources is None:
        raise ProbeError("give --label CLASS (and --image N to label one image) for the cluster, --preview FILE, "
                         "--sources FILE or --novelty FILE")
    if args.export_csv:
        count = label_tools.export_labels_csv(store, args.run, args.export_csv)
        print(f"{count} labels written to {args.export_csv}")
    if args.export_npz:
        content, count = queries.labelled_failures_npz(store, args.run, class_names, source, args.rho)
        write_file(args.export_npz, content)
        print(f"{count} labelled failures written to {args.export_npz}")
    _print_clusters(workspace, args.run, class_names, source, args.rho)
    return 0


def _label_images(workspace, args, class_names: tuple[str, ...]) -> None:
    """``--cluster ID --label CLASS [--image N ...]``: label the cluster's review images (all, or those named)."""
    if args.failure is not None:
        raise ProbeError("--failure/--no-failure are gone: label what each image shows (--label CLASS, --image N) "
                         "and the failure verdict follows from the labels, as in the paper")
    args.annotator = shell_annotator(workspace.store, args.annotator)
    cluster = workspace.store.get_cluster(args.cluster)
    if cluster is None or cluster["run_id"] != args.run:
        raise ProbeError(f"cluster {args.cluster} is not a cluster of run {args.run}")
    label_tools.normalise_label(args.label, class_names)  # a bad class fails before models are loaded
    shown = _review_images(workspace, args, cluster)
    positions = args.image or list(range(1, len(shown["ids"]) + 1))
    if not all(1 <= position <= len(shown["ids"]) for position in positions):
        raise ProbeError(f"--image counts from 1 to {len(shown['ids'])}, got {positions}")
    label_tools.label_images(workspace.store, [shown["ids"][p - 1] for p in positions], args.annotator, args.label,
                             class_names)
    which = "all images" if not args.image else "image " + ", ".join(map(str, positions))
    print(f"stored: cluster {args.cluster}, {which} = {args.label}, by {args.annotator}")


def _review_images(workspace, args, cluster: dict) -> dict:
    _, classifier, vae = queries.load_run_models(workspace.registry, workspace.store, args.run, args.device)
    return defuse_review.review_images(workspace.store, vae, classifier, cluster,
                                  queries.distill_tau(workspace.store, args.run))


def _write_preview(workspace, args) -> None:
    if args.cluster is None:
        raise ProbeError("--preview needs --cluster ID")
    cluster = workspace.store.get_cluster(args.cluster)
    if cluster is None:
        raise ProbeError(f"no cluster {args.cluster}")
    shown = _review_images(workspace, args, cluster)
    with open(args.preview, "wb") as handle:
        handle.write(png_bytes(image_grid(shown["images"], columns=len(shown["ids"]),
                                          scale=upscale_for_display(shown["images"].shape[-2]))))
    names = _class_names(workspace, args.run, args.data_dir)
    predictions = ", ".join(f"{position}: {names[int(p)]}" for position, p in enumerate(shown["predictions"], 1))
    print(f"the {len(shown['ids'])} review images of cluster {args.cluster} written to {args.preview}; "
          f"the classifier says {predictions}")
    for copies in defuse_review.duplicate_groups(shown["images"]):
        if len(copies) > 1:
            numbers = " ".join(str(copy + 1) for copy in copies)
            options = " ".join(f"--image {copy + 1}" for copy in copies)
            print(f"images {numbers} are the same picture: label them together ({options} --label CLASS)")


def _cluster_of_run(workspace, args, flag: str) -> dict:
    if args.cluster is None:
        raise ProbeError(f"{flag} needs --cluster ID")
    cluster = workspace.store.get_cluster(args.cluster)
    if cluster is None or cluster["run_id"] != args.run:
        raise ProbeError(f"cluster {args.cluster} is not a cluster of run {args.run}")
    return cluster


def _write_rows(path: str, top, bottom) -> None:
    """A PNG of images (S, C, H, W) over as many others, one row each."""
    import torch

    both = torch.cat([top, torch.as_tensor(bottom)])
    write_file(path, png_bytes(image_grid(both, columns=len(top), scale=upscale_for_display(both.shape[-2]))))


def _write_sources(workspace, args, class_names: tuple[str, ...]) -> None:
    """``--sources FILE``: the review images over the training images they came from, listed."""
    cluster = _cluster_of_run(workspace, args, "--sources")
    found = defuse_review.review_sources(workspace.registry, workspace.store, args.run, cluster, args.device)
    _write_rows(args.sources, found["review_images"], found["images"])
    rows = [[position, index, class_names[label], f"{distance:.2f}"] for position, (index, label, distance)
            in enumerate(zip(found["index"], found["label"], found["latent_distance"]), 1)]
    print(f"{args.sources}: top row the review images, bottom row the training image each came from (the source "
          f"of the cluster's failure nearest it in the generator's codes)")
    print(format_table(rows, ["image", "training index", "its label", "code distance"]))


def _write_novelty(workspace, args, class_names: tuple[str, ...]) -> None:
    """``--novelty FILE``: the review images over their nearest misclassified training images (paper Fig. 6)."""
    cluster = _cluster_of_run(workspace, args, "--novelty")
    found = defuse_review.nearest_misclassified_training(workspace.registry, workspace.store, args.run, cluster,
                                                    args.device)
    if not found["misclassified_training_images"]:
        print("the classifier gets every training image right: nothing to compare with, the failure is new")
        return
    _write_rows(args.novelty, found["review_images"], found["images"])
    rows = [[position, index, class_names[label], class_names[prediction], f"{distance:.2f}", f"{anywhere:.2f}"]
            for position, (index, label, prediction, distance, anywhere) in enumerate(zip(
                found["index"], found["label"], found["prediction"], found["distance"],
                found["nearest_any_distance"]), 1)]
    print(f"{args.novelty}: top row the review images, bottom row the nearest of the "
          f"{found['misclassified_training_images']} misclassified training images")
    print(format_table(rows, ["image", "training index", "its label", "classifier says", "l2", "l2 to any training"]))


def _correct_options(args) -> dict:
    """The correction settings the command line gives (all but the distillation run and the labels' source)."""
    return {"rho": args.rho, "lambdas": None if args.lambdas is None else tuple(args.lambdas),
            "epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch,
            "samples_per_region": args.samples_per_region, "seed": args.seed, "executor": args.executor,
            "baseline": args.baseline, "selection": args.selection, "validation": args.validation,
            "learning_rate": args.learning_rate, "keep_batch_statistics": args.keep_batch_statistics}


def _correct(args) -> int:

    workspace = workspace_from_args(args)
    request = steps.CorrectRequest.build(workspace.registry, distill_run=args.run, source=args.source,
                                         **_correct_options(args))
    run_id, result = _run_step(args, workspace.registry, request, "correct")
    _print_results(result)
    _write_out(args, workspace, args.run, args.source, run_id)
    return 0


def _write_out(args, workspace, distill_run: int, source: str, correct_run: int | None) -> None:
    if not args.out:
        return
    summary = queries.report(workspace.store, distill_run, _class_names(workspace, distill_run, args.data_dir),
                              source, args.rho, correct_run)
    with open(args.out, "w") as handle:
        json.dump(summary, handle, indent=1)
    print(f"summary written to {args.out}")


def _run_all(args) -> int:

    workspace = workspace_from_args(args)
    registry = workspace.registry.remembering()  # each model loaded once for the whole command
    oracle = _oracle(args)
    # the later steps' settings are checked, once, before anything runs (their runs do not exist yet: each takes
    # the run its step follows when that run is made)
    correct = steps.CorrectRequest.from_settings(distill_run=1, source=label_tools.HUMAN, **_correct_options(args))
    distill = steps.DistillRequest.from_settings(identify_run=1, **_distill_options(args))
    settings = steps.IdentifyRequest.build(registry, device=args.device, train_missing=True,
                                           **_identify_settings(args))
    identify_run, result = _run_step(args, registry, settings, "identify")
    class_names = tuple(result.class_names)
    _print_identify(identify_run, result, class_names)
    if result.failures < 2:
        raise ProbeError("identification found fewer than 2 failures, nothing to cluster (try more samples per "
                         "image or a larger --noise-scale)")
    distill_run, result = _run_step(args, registry, distill.derived(identify_run=identify_run), "distill")
    _print_distilled(distill_run, result)
    source = label_tools.HUMAN
    if oracle is not None:
        source, _ = defuse_review.auto_label(registry, workspace.store, distill_run, oracle,
                                             rho=args.rho, device=args.device,
                                             abstain_below=args.oracle_abstains_below)
    _print_clusters(workspace, distill_run, class_names, source, args.rho)
    if oracle is None:
        print(f"label the clusters (dashboard Label page, or probe defuse label --run {distill_run} ...), then run "
              f"probe defuse correct --run {distill_run}")
        _write_out(args, workspace, distill_run, source, None)
        return 0
    correct_run, result = _run_step(args, registry, correct.derived(distill_run=distill_run, source=source), "correct")
    _print_results(result)
    _write_out(args, workspace, distill_run, source, correct_run)
    return 0


def _runs(args) -> int:

    workspace = workspace_from_args(args)
    rows = []
    for kind in (queries.IDENTIFY, queries.DISTILL, queries.CORRECT):
        for run in workspace.store.list_runs(kind=kind, limit=args.limit):
            parent = run.config.get("identify_run", run.config.get("distill_run", ""))
            summary = run.result or {}
            what = {queries.IDENTIFY: f"{summary.get('failures', '?')} failures",
                    queries.DISTILL: f"{summary.get('clusters', '?')} clusters",
                    queries.CORRECT: summary.get("corrected_model", "")}[kind]
            rows.append([run.id, kind.removeprefix("defuse-"), run.status, parent, what if run.result else run.message])
    rows.sort(key=lambda r: r[0], reverse=True)
    print(format_table(rows, ["run", "step", "status", "parent", "summary"]) if rows else "no Defuse runs yet")
    return 0


def _add_identify_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default=DEFAULT_DATASET, help="e.g. digits, mnist, digits[mislabel=9->8:0.4]")
    parser.add_argument("--classifier", default="default", help="model id, 'default' or a plugin .py")
    parser.add_argument("--vae", default="default", help="VAE model id, 'default' or a plugin .py with an encoder")
    parser.add_argument("--class-map", help="MODEL_CLASS=DATA_CLASS,... where the classifier's class names differ "
                        "from the data set's (classes are matched by name, never by position)")
    parser.add_argument("--samples-per-image", type=int, default=500, help="Q, perturbations per image")
    parser.add_argument("--max-per-image", type=int, default=100, help="M, failures kept per image")
    parser.add_argument("--noise", choices=list(NOISE_MODES),
                        help="centered: Beta noise centred, sd --noise-scale; paper: μ + ε with ε ~ Beta(a, b), as "
                        f"Algorithm 1 (default: {SMALL_IMAGE_NOISE['noise']} below {REAL_SIZE_LABEL}, "
                        f"{REAL_SIZE_NOISE['noise']} on {REAL_SIZE_LABEL} and up, as the papers' colour runs)")
    parser.add_argument("--noise-scale", type=float,
                        help=f"sd per dimension of centred noise (default: {SMALL_IMAGE_NOISE['noise_scale']:g}, or "
                        "the one the generator asks for)")
    for beta_parameter in ("a", "b"):
        parser.add_argument(f"--{beta_parameter}", type=float,
                            help=f"Beta(a, b) noise (default: {SMALL_IMAGE_NOISE[beta_parameter]:g} below "
                            f"{REAL_SIZE_LABEL}, {REAL_SIZE_NOISE[beta_parameter]:g} on {REAL_SIZE_LABEL} and up)")
    parser.add_argument("--max-images", type=int, help="only the first N training images (quick looks)")
    parser.add_argument("--allow-weak-classifier", action="store_true",
                        help="identify even with a classifier near chance on the data's test images (refused "
                        "otherwise); the run is then flagged")
    parser.add_argument("--shards", type=int, help="split the training images into this many shards, each with its "
                        "own seed (default: 1 with --executor local, one per worker with ray)")
    parser.add_argument("--judge", help="a classifier other than the probed one (id, 'default', plugin or model file; "
                        "'features:default', the generator's own feature network, where it keeps one; "
                        "'neighbours:features:default', the vote of the nearest training images in that network's "
                        "features, which learns no labels but keeps many blurs, docs/defuse.md): a misclassified "
                        "decoding counts as a failure only if the "
                        "judge still sees its source class in it, so the generator's own blurs are not kept; 'none': "
                        "no judge (default: from 32x32 up the generator's feature network where it has one, below "
                        "that none)")
    parser.add_argument("--judge-sure", type=float, metavar="P",
                        help="with a judge: its least probability of the source class (default: the judge's own, "
                        f"{DEFAULT_JUDGE_SURE:g} for a classifier, {NEIGHBOUR_MAJORITY:g} of the votes for a neighbour "
                        "vote)")


def _add_distill_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--components", type=int, default=100, help="K, upper bound on mixture components")
    parser.add_argument("--threshold", type=float, default=0.01, help="ε, drop clusters with weight ≤ ε")
    parser.add_argument("--max-samples", type=int, default=10_000, help="fit on at most this many failures")
    parser.add_argument("--tau", type=float, help="review and correction samples from N(μ, τΣ) (default: from the "
                        f"image size: {REAL_SIZE_REVIEW_TAU:g} on {REAL_SIZE_LABEL} and up, the papers' colour "
                        f"setting; {REVIEW_TAU:g} below)")
    parser.add_argument("--projection", type=int, help="cluster the codes' first N principal components, the "
                        f"clusters mapped back as probabilistic PCA (0: the codes themselves; default: "
                        f"{PROJECTED_CODE_SIZE} for codes of more than {PROJECT_CODES_ABOVE} dimensions)")
    parser.add_argument("--class-share", type=float, default=0.0, help="also keep a cluster lighter than ε that "
                        f"holds this share of one class's failures, at least {MIN_CLASS_REGION} of them (default 0: ε "
                        "alone, the papers')")


def _lambda_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 0.1,1,10, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one λ")
    return values


def _add_correct_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lambdas", type=_lambda_list, default=None,
                        help="comma-separated λ grid (default: the paper's 17 from 1e-10 to 1000; on images of "
                             f"{REAL_SIZE_LABEL} and up "
                             + ",".join(f"{lam:g}" for lam in correction.REAL_SIZE_LAMBDAS) + ")")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="at most this many batches of the training data per epoch (default: a full pass; on "
                             f"images of {REAL_SIZE_LABEL} and up {correction.REAL_SIZE_STEPS_PER_EPOCH})")
    parser.add_argument("--samples-per-region", type=int, default=256)
    parser.add_argument("--baseline", choices=list(correct_step.BASELINES), default="labelled-images",
                        help="what the baseline finetunes on: the individually labelled failures (the paper's, "
                             "default) or the failures in failure regions with their region's label")
    parser.add_argument("--selection", choices=list(correction.SELECTION_RULES), default=None,
                        help="how the λ and epoch are picked: data: validation accuracy on the original data (the "
                             "paper's); data-and-failures: its mean with accuracy on held-out failure-region samples "
                             f"(default: {correction.SMALL_IMAGE_SELECTION} below {REAL_SIZE_LABEL}, "
                             f"{correction.REAL_SIZE_SELECTION} on {REAL_SIZE_LABEL} and up)")
    parser.add_argument("--validation", choices=list(correction.VALIDATION_SOURCES), default=None,
                        help="where the validation images come from: a slice of the training data, or half of the "
                             "test set (the other half reports test accuracy; the paper's SVHN and German-signs "
                             f"protocol); default: half of the test set on images of {REAL_SIZE_LABEL} and up, else "
                             "training")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help=f"Adam's learning rate (default: the paper's {correction.PAPER_LEARNING_RATE:g}; "
                             f"on images of {REAL_SIZE_LABEL} and up {correction.REAL_SIZE_LEARNING_RATE:g})")
    parser.add_argument("--keep-batch-statistics", action=argparse.BooleanOptionalAction, default=None,
                        help="keep the classifier's BatchNorm statistics while finetuning (default: on images of "
                             f"{REAL_SIZE_LABEL} and up)")
    parser.add_argument("--out", help="write the summary as JSON")


def add_defuse_commands(commands: argparse._SubParsersAction) -> None:
    defuse = commands.add_parser("defuse", help="Defuse: find failure clusters, label them, finetune the fix")
    sub = defuse.add_subparsers(dest="action", required=True)

    identify = sub.add_parser("identify", help="perturb VAE codes of the training data, keep misclassified decodings")
    _add_identify_options(identify)
    identify.add_argument("--seed", type=int, default=0)
    identify.set_defaults(handler=_identify)

    distill = sub.add_parser("distill", help="cluster an identification run's failures (Dirichlet-process GMM)")
    distill.add_argument("--run", type=int, required=True, help="the identification run")
    _add_distill_options(distill)
    distill.add_argument("--seed", type=int, default=0)
    distill.set_defaults(handler=_distill)

    label = sub.add_parser("label", help="label clusters, auto-label with an oracle, show or export labels")
    label.add_argument("--run", type=int, required=True, help="the distillation run")
    label.add_argument("--cluster", type=int, help="cluster id (first column of the table)")
    label.add_argument("--annotator")
    label.add_argument("--failure", action=argparse.BooleanOptionalAction, default=None, help=argparse.SUPPRESS)
    label.add_argument("--label", help="the class the images show, or 'none' for none of the above")
    label.add_argument("--image", type=int, action="append",
                       help="label only this review image (1-10; repeat for several); default: all of them")
    label.add_argument("--preview", help="write a PNG of the cluster's review images (the ones labelled)")
    label.add_argument("--sources", help="write a PNG of the review images over the training images they came "
                                         "from (each the source of the cluster's failure nearest it), and list them")
    label.add_argument("--novelty", help="write a PNG of the review images over their nearest misclassified "
                                         "training images, and list them (is the failure new? paper Fig. 6)")
    label.add_argument("--auto-label", help="oracle:MODEL_OR_PLUGIN (demos and tests; stored apart from humans)")
    _add_oracle_options(label)
    label.add_argument("--source", default=label_tools.HUMAN, help="whose labels to show/export: human or oracle:ID")
    label.add_argument("--rho", type=float, default=label_tools.DEFAULT_RHO)
    label.add_argument("--export-csv", help="write all labels of the run as CSV")
    label.add_argument("--export-npz", help="write the labelled failures (images, latents, labels) as .npz")
    label.set_defaults(handler=_label)

    correct = sub.add_parser("correct", help="finetune on the labelled failure clusters over a sweep of λ")
    correct.add_argument("--run", type=int, required=True, help="the distillation run")
    correct.add_argument("--source", default=label_tools.HUMAN, help="labels to use: human or oracle:ID")
    correct.add_argument("--rho", type=float, default=label_tools.DEFAULT_RHO)
    correct.add_argument("--seed", type=int, default=0)
    _add_correct_options(correct)
    correct.set_defaults(handler=_correct)

    everything = sub.add_parser("run", help="identify, distill, (auto-)label and correct in one go")
    _add_identify_options(everything)
    _add_distill_options(everything)
    _add_correct_options(everything)
    everything.add_argument("--auto-label", help="oracle:MODEL_OR_PLUGIN; without it the run stops for human labels")
    _add_oracle_options(everything)
    everything.add_argument("--rho", type=float, default=label_tools.DEFAULT_RHO)
    everything.add_argument("--seed", type=int, default=0)
    everything.set_defaults(handler=_run_all)

    runs = sub.add_parser("runs", help="list Defuse runs")
    runs.add_argument("--limit", type=int, default=20)
    runs.set_defaults(handler=_runs)
