"""Never a silently wrong answer on a user's own model and data: classes matched by name and checked, model
files with sidecars, plugins as ordinary Python files, a generator check, and settings refused before any work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from probe_core.catalog import load_dataset
from probe_core.data.classes import ClassMismatchError, with_class_map
from probe_core.models.checks import check_classifier, check_generator
from probe_core.progress import SILENT

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
PROBE = [sys.executable, "-m", "probe_core.cli"]


def _write_folder(root: Path, names) -> Path:
    """The digits split as an image folder with train/ and test/ and class sub-folders named ``names[digit]``."""
    digits = load_dataset("digits")
    for split, images, labels in (("train", digits.train_images, digits.train_labels),
                                  ("test", digits.test_images, digits.test_labels)):
        for index, (image, label) in enumerate(zip(images, labels)):
            folder = root / split / names[int(label)]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((image[0].numpy() * 255).round().astype(np.uint8)).save(folder / f"{index}.png")
    return root


def _default_classifier_plugin(folder: Path, workspace, class_names) -> Path:
    """A plugin that loads the default digits classifier's weights from beside itself, through a sibling module."""
    folder.mkdir(parents=True, exist_ok=True)
    record = workspace.store.get_model(workspace.registry.default_id("digits", "classifier"))
    torch.save(torch.load(record["path"], weights_only=True), folder / "weights.pt")
    (folder / "architecture.json").write_text(json.dumps(record["spec"]["architecture"]))
    (folder / "netdef.py").write_text(
        "import json\nfrom pathlib import Path\n"
        "from probe_core.models.architectures import CLASSIFIER_ARCHITECTURES\n"
        "def build(folder):\n"
        "    arch = json.loads((Path(folder) / 'architecture.json').read_text())\n"
        "    return CLASSIFIER_ARCHITECTURES[arch['class']](**arch['args'])\n")
    path = folder / "my_classifier.py"
    path.write_text(
        "from pathlib import Path\nimport torch\nimport netdef  # a module beside this file\n"
        f"class_names = {list(class_names)!r}\n"
        "input_shape = (1, 8, 8)\nclassifier_outputs = 'logits'\n"
        "HERE = Path(__file__).parent\n"
        "def classifier():\n"
        "    net = netdef.build(HERE)\n"
        "    net.load_state_dict(torch.load(HERE / 'weights.pt', weights_only=True))\n"
        "    return net\n")
    return path


def _probe(*args, cwd, workspace, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([*PROBE, "--workspace", str(workspace), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_plugin_classes_are_matched_to_a_words_folder_by_name_from_any_directory(trained_workspace, tmp_path):
    words = _write_folder(tmp_path / "words", WORDS)
    digits = _write_folder(tmp_path / "digit-names", [str(i) for i in range(10)])
    plugin = _default_classifier_plugin(tmp_path / "plugin", trained_workspace, WORDS)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outcome = {}
    for name, folder in (("words", words), ("digits", digits)):
        names = WORDS if name == "words" else [str(i) for i in range(10)]
        if name == "digits":
            plugin = _default_classifier_plugin(tmp_path / "plugin-digits", trained_workspace, names)
        done = _probe("models", "check", "--classifier", str(plugin), "--dataset", str(folder), "--json",
                      cwd=elsewhere, workspace=trained_workspace.root)
        assert done.returncode == 0, done.stderr
        outcome[name] = json.loads(done.stdout)["classifier"]
    # folders sort alphabetically (eight, five, four, ...): by position this would be near chance
    assert outcome["words"]["class_map"]["seven"] == "seven"
    assert outcome["words"]["accuracy"] > 0.9
    assert abs(outcome["words"]["accuracy"] - outcome["digits"]["accuracy"]) < 0.02


def test_disjoint_class_names_stop_with_both_lists(trained_workspace, tmp_path):
    plugin = _default_classifier_plugin(tmp_path / "plugin", trained_workspace, [f"c{i}" for i in range(10)])
    models_before = len(trained_workspace.registry.list())
    done = _probe("models", "check", "--classifier", str(plugin), "--dataset", "digits", cwd=tmp_path,
                  workspace=trained_workspace.root)
    assert done.returncode == 2
    assert "c0, c1" in done.stderr and "0, 1, 2" in done.stderr and "--class-map" in done.stderr
    assert len(trained_workspace.registry.list()) == models_before  # refused before anything was trained
    mapped = with_class_map(str(plugin), ",".join(f"c{i}={i}" for i in range(10)))
    loaded = trained_workspace.registry.resolve(mapped, "classifier", "digits")
    assert check_classifier(loaded, load_dataset("digits")).accuracy > 0.9


def test_a_near_chance_permutation_is_refused_and_named(trained_workspace, tmp_path):
    rotated = ",".join(f"{i}={(i + 1) % 10}" for i in range(10))
    done = _probe("models", "check", "--class-map", rotated, cwd=tmp_path, workspace=trained_workspace.root)
    assert done.returncode == 2, done.stdout
    assert "reassigned" in done.stderr and "0=1" in done.stderr.replace(" ", "")
    with pytest.raises(ClassMismatchError, match="more than once"):
        trained_workspace.registry.resolve(with_class_map("default", "0=1"), "classifier", "digits")


@pytest.mark.parametrize("suffix", [".pt", ".pt2"])
def test_torchscript_and_export_classifiers_with_a_sidecar(trained_workspace, tmp_path, suffix):
    from probe_core.defuse.correct_step import corrected_model_record

    registry = trained_workspace.registry
    default = registry.resolve("default", "classifier", "digits")
    reversed_net = torch.nn.Sequential(default.module.net, _Reverse()).eval()
    path = tmp_path / f"reversed{suffix}"
    example = torch.rand(2, 1, 8, 8)
    if suffix == ".pt2":
        batch = {0: torch.export.Dim("batch", min=1, max=4096)}  # a dynamic batch: the product runs any batch size
        torch.export.save(torch.export.export(reversed_net, (example,), dynamic_shapes=(batch,)), str(path))
    else:
        torch.jit.save(torch.jit.trace(reversed_net, example), str(path))
    names = [str(i) for i in reversed(range(10))]
    path.with_suffix(".json").write_text(json.dumps({"class_names": names, "input_shape": [1, 8, 8],
                                                     "outputs": "logits"}))
    loaded = registry.resolve(str(path), "classifier", "digits")
    data = load_dataset("digits")
    assert loaded.class_names == data.class_names and loaded.class_match.mapping["9"] == "9"
    assert abs(check_classifier(loaded, data).accuracy - check_classifier(default, data).accuracy) < 1e-6
    # a finetuned copy registers and loads back (same outputs, matched again by name)
    record = corrected_model_record(loaded, data)
    model_id = f"{record.pop('id_stem')}-finetuned"
    registry.register(loaded.module.net, record, {}, model_id)
    again = registry.resolve(model_id, "classifier", "digits")
    images = data.test_images[:16]
    assert torch.allclose(again.module(images), default.module(images), atol=1e-5)


class _Reverse(torch.nn.Module):
    def forward(self, x):
        return x.flip(-1)


def test_a_one_epoch_vae_is_weak_and_the_default_ok(trained_workspace):
    from probe_core.models import ModelSpec

    registry = trained_workspace.registry
    data = load_dataset("digits")
    classifier = registry.resolve("default", "classifier", "digits")
    default = check_generator(registry.resolve("default", "generator", "digits"), classifier, data)
    assert default.verdict == "ok", default.figures
    weak_vae = registry.get_or_train(ModelSpec(dataset="digits", kind="vae", epochs=1), reporter=SILENT)
    weak = check_generator(weak_vae, classifier, data)
    assert weak.verdict == "weak" and weak.failed and "weak" in weak.warning
    assert weak.samples.shape == (16, 1, 8, 8)
    # the advice is the recipe trained twice as long, a command that runs as written and makes the model the
    # Models page's fix button trains, with the time it should take from the weak model's own training time
    remedy = weak.remedy
    assert remedy is not None and remedy.spec.epochs == 2 and remedy.epochs_before == 1
    assert f"`{remedy.command}`" in weak.warning and " N" not in remedy.command and " D" not in remedy.command
    assert remedy.estimated_seconds == pytest.approx(2 * weak_vae.metrics["train_seconds"], abs=0.011)
    assert weak.to_dict()["remedy"]["command"] == remedy.command
    from helpers import probe_here

    done = probe_here(["--workspace", str(trained_workspace.root), *remedy.command.split()[1:]])
    assert done.returncode == 0, done.stderr
    fixed = remedy.spec.resolved(data).model_id()
    assert done.stdout.startswith(f"{fixed}: ") and registry.load(fixed).record["spec"]["epochs"] == 2
    # a generator the tool did not train (no stored recipe) gets no made-up command
    from probe_core.models.loaded import LoadedModel

    foreign = LoadedModel("in-memory-vae", "vae", weak_vae.module, (), {"metrics": {}})
    foreign_check = check_generator(foreign, classifier, data)
    assert foreign_check.weak and foreign_check.remedy is None and "probe models train" not in foreign_check.warning
    from probe_core.runs.validation import better_generator

    better = better_generator(registry, classifier, data, weak_vae.id)  # what `probe sample` suggests instead
    assert better is not None and better != weak_vae.id
    assert check_generator(registry.resolve(better, "generator", "digits"), classifier, data).verdict == "ok"


@pytest.mark.parametrize("arguments", [
    ["sample", "--target", "high:3", "--chains", "0"],
    ["sample", "--target", "high:3", "--warmup", "-5"],
    ["sample", "--target", "high:eleven"],
    ["defuse", "run", "--lambdas", "0.1,-1"],
])
def test_bad_settings_on_an_empty_workspace_exit_2_before_anything_trains(tmp_path, arguments, capsys, monkeypatch):
    from probe_core.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["--workspace", str(tmp_path / "ws"), *arguments])
    stderr = capsys.readouterr().err
    assert code == 2 and stderr.startswith("error: "), stderr
    # it used to train the default models first, for minutes: now nothing is trained or stored
    assert not list((tmp_path / "ws" / "models").glob("*.pt"))


def test_a_stale_ray_address_starts_a_local_instance():
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths live under it
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1\n")  # a stopped instance left its address
    script = ("from probe_core.runs.scaleout import RayShards\n"
              "ray = RayShards(num_cpus=1).connect()\n"
              "print(int(ray.cluster_resources()['CPU']))\nray.shutdown()\n")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "RAY_TMPDIR": str(ray_tmp)},
                          capture_output=True, text=True, timeout=300)  # a hang guard, not a timing goal
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1"
    assert "stale Ray address 127.0.0.1:1" in done.stderr  # it noticed the dead address instead of waiting on it
    shutil.rmtree(ray_tmp, ignore_errors=True)


def test_defuse_on_a_words_folder_finds_as_few_failures_as_on_digit_names(trained_workspace, tmp_path):
    """The reported bug: a classifier right on the images became thousands of "failures" by class position."""
    vae = trained_workspace.registry.default_id("digits", "vae")
    failures = {}
    for name, names in (("words", WORDS), ("digits", [str(i) for i in range(10)])):
        folder = _write_folder(tmp_path / name, names)
        plugin = _default_classifier_plugin(tmp_path / f"plugin-{name}", trained_workspace, names)
        done = _probe("defuse", "identify", "--dataset", str(folder), "--classifier", str(plugin), "--vae", vae,
                      "--samples-per-image", "20", cwd=tmp_path, workspace=trained_workspace.root, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        failures[name] = int(done.stdout.split(" failures from ")[0].split()[-1])
    # the same images and classifier (in another order, so other noise draws): as many failures, whatever the
    # folders are called; matched by position, nearly every one of the 1,437 x 20 decodings was a "failure"
    assert abs(failures["words"] - failures["digits"]) <= 0.25 * failures["digits"] + 20, failures
    assert failures["words"] < 1437 * 20 * 0.2


def test_a_plugin_loads_its_weights_and_sibling_module_in_a_worker_process(trained_workspace, tmp_path):
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.runs.jobs import JobManager
    from probe_core.runs.launchers import ProcessLauncher
    from probe_core.runs.lifecycle import submit

    plugin = _default_classifier_plugin(tmp_path / "plugin", trained_workspace, WORDS)
    words = _write_folder(tmp_path / "words", WORDS)
    from probe_core.catalog import canonical_dataset_name, load_dataset

    dataset = canonical_dataset_name(str(words))
    generator = trained_workspace.registry.default_id("digits", "vae")
    manager = JobManager(trained_workspace.store, ProcessLauncher(threads=1))
    names = tuple(load_dataset(dataset, trained_workspace.registry.data_dir).class_names)
    config = SampleRequest(dataset=dataset, target="high:seven", class_names=names,
                           classifier=str(plugin.resolve()), generator=generator, chains=4, warmup=10, samples=10)
    run_id = submit(manager, config)
    run = manager.wait(run_id, timeout=300)
    assert run.status == "done", run.error
    assert run.result["model_checks"]["classifier"]["class_map"]["seven"] == "seven"
    assert run.result["targets"][0]["description"].endswith("seven")


def _guide_block(language: str, after: str) -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = text[text.index(after):]
    start = section.index(f"```{language}\n") + len(language) + 4
    return section[start:section.index("```", start)]


def test_the_bring_your_own_model_guide_runs_as_written(trained_workspace, tmp_path):
    """The plugin, sidecar and `probe models check` lines of docs/models.md, run as written (8x8 digits for 28x28)."""
    folder = tmp_path / "mine"
    built = _default_classifier_plugin(folder, trained_workspace, WORDS)  # its netdef.py and weights.pt
    (folder / "my_net.py").write_text("from pathlib import Path\nimport netdef\n"
                                      "def MyNet():\n    return netdef.build(Path(__file__).parent)\n")
    plugin = _guide_block("python", "# Bring your own model")
    assert "Path(__file__).parent" in plugin and "from my_net import MyNet" in plugin
    (folder / "my_model.py").write_text(plugin.replace("(1, 28, 28)", "(1, 8, 8)").replace("    ...\n", "    pass\n")
                                        .replace("def generator():", "def _generator():"))
    built.unlink()
    sidecar = json.loads(_guide_block("json", "# Bring your own model"))
    assert {"class_names", "input_shape", "outputs", "class_map"} <= set(sidecar)
    default = trained_workspace.registry.resolve("default", "classifier", "digits")
    torch.jit.save(torch.jit.trace(default.module.net.eval(), torch.rand(2, 1, 8, 8)), str(folder / "net.pt"))
    (folder / "net.json").write_text(json.dumps({**sidecar, "class_names": list(WORDS), "input_shape": [1, 8, 8],
                                                 "class_map": {}}))
    _write_folder(folder / "my_images", WORDS)
    commands = [line.split("#")[0].split()[1:] for line in _guide_block("bash", "**The check.**").splitlines()]
    assert len(commands) == 4
    for command in commands:
        arguments = [a.strip('"') for a in command]
        done = _probe(*arguments, cwd=folder, workspace=trained_workspace.root)
        assert done.returncode == 0, (arguments, done.stderr)
        assert "accuracy 9" in done.stdout or '"accuracy": 0.9' in done.stdout, done.stdout


def test_an_in_memory_module_with_class_names_is_matched_and_checked(trained_workspace):
    from probe_core.models.loaded import align_classifier, in_memory_classifier

    data = load_dataset("digits")
    default = trained_workspace.registry.resolve("default", "classifier", "digits")
    module = torch.nn.Sequential(default.module.net, _Reverse())
    loaded = align_classifier(in_memory_classifier(module, [str(i) for i in reversed(range(10))], (1, 8, 8)), data)
    assert check_classifier(loaded, data).accuracy == check_classifier(default, data).accuracy
    with pytest.raises(ClassMismatchError):
        align_classifier(in_memory_classifier(module, WORDS, (1, 8, 8)), data)


def test_sampling_with_a_plugin_classifier_trains_no_zoo_classifier(tmp_path, workspace):
    from helpers import write_tiny_plugin

    from probe_core.models import ModelSpec

    plugin = write_tiny_plugin(tmp_path)
    done = _probe("sample", "--target", "high:3", "--classifier", str(plugin), "--generator", str(plugin),
                  "--chains", "2", "--warmup", "2", "--samples", "2", cwd=tmp_path, workspace=workspace.root)
    assert done.returncode == 0, done.stderr[-2000:]
    # a generator the run needs is trained without the data set's classifier (its FD-clf waits for one)
    vae = workspace.registry.get_or_train(ModelSpec(dataset="digits", kind="vae", epochs=1), reporter=SILENT)
    assert "fd_classifier_features" not in vae.metrics
    assert not [m for m in workspace.registry.list() if m["kind"] == "classifier"]
