"""``probe data list|info``: the data sets and what is in them."""

from __future__ import annotations

import argparse

from probe_core.catalog import canonical_dataset_name, list_datasets, load_dataset
from probe_core.errors import ProbeError
from probe_core.reporting.export import format_table


def _data_list(args: argparse.Namespace) -> int:
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
    if args.name and args.dataset and args.name != args.dataset:
        raise ProbeError(f"give the data set once: {args.name!r} or --dataset {args.dataset!r}")
    name = args.dataset or args.name
    if not name:
        raise ProbeError("name the data set: probe data info --dataset NAME (or probe data info NAME)")
    dataset = load_dataset(canonical_dataset_name(name), args.data_dir)
    counts = lambda labels: ", ".join(  # noqa: E731
        f"{dataset.class_names[c]}: {int((labels == c).sum())}" for c in range(dataset.num_classes)
    )
    stored = f" (stored as {dataset.name})" if dataset.display_name != dataset.name else ""
    print(f"{dataset.display_name}{stored}: {dataset.source}")
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
    info.add_argument("--dataset", help="e.g. digits, mnist, fashion-mnist, idx, digits[drop=5], a folder of class "
                      "sub-folders of images (./my_images) or a .npz of arrays (data.npz)")
    info.add_argument("name", nargs="?", help="the same, as a positional argument (an alias of --dataset)")
    info.set_defaults(handler=_data_info)

