"""Bad input, tried systematically: one clear message (CLI exit 2, st.error on a page), nothing stored changes."""

from __future__ import annotations

import gzip
import re
import struct
from pathlib import Path

import numpy as np
from helpers import load_linked_files, shown, write_tiny_plugin
from hypothesis import example, given, settings
from hypothesis import strategies as st

from probe_core.cli import main
from probe_core.errors import ProbeError
from probe_core.sampling.targets import parse_targets

CLASS_NAMES = tuple(str(i) for i in range(10))
SPEC_ALPHABET = st.sampled_from(list("0123456789:;,.=->_ abhigmuxprs") + ["high", "ambiguous", "probs", "path",
                                                                          "uniform", "ambiguous-matrix", "nan",
                                                                          "inf", "-", "1e9", "\x00", "é"])


# A message quotes at most an excerpt of the input (errors.excerpt: 32 characters, escaped), so its length is
# bounded whatever is typed; these are the inputs fuzz runs found, kept as examples.
MESSAGE_BOUND = 400


def _check_spec(spec: str, class_names) -> None:
    try:
        targets = parse_targets(spec, class_names)
    except ProbeError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < MESSAGE_BOUND, message
        assert message.isprintable(), message
    else:
        assert targets and all(t.num_classes == len(class_names) for t in targets)


@settings(max_examples=max(400, settings.default.max_examples))  # `make fuzz`'s profile raises it
@given(st.one_of(st.text(max_size=40), st.lists(SPEC_ALPHABET, max_size=12).map("".join)))
@example("high:" + "\x00" * 35)  # found by a fuzz run: a 40-character spec whose message was 400 characters
@example("ambiguous:" + "é\x01" * 15 + "," + "\x00" * 40)
@example("probs:" + "\x00" * 30 + "=" + "\x07" * 30)
@example("\x00" * 400 + ":1")
def test_every_target_spec_parses_or_raises_the_projects_error(spec):
    _check_spec(spec, CLASS_NAMES)


@settings(max_examples=max(100, settings.default.max_examples))
@given(st.text(max_size=200))
@example("high:" + "x" * 300)
def test_messages_stay_short_with_many_long_class_names(spec):
    _check_spec(spec, tuple(f"a-rather-long-traffic-sign-name-{i}" for i in range(43)))


def _write_idx(folder: Path, images: np.ndarray, labels: np.ndarray, prefix: str = "t10k",
               truncate_images: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">IIII", 0x00000803, len(images), images.shape[1], images.shape[2])
    body = images.astype(np.uint8).tobytes()
    if truncate_images:
        body = body[: len(body) // 2]
    (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(header + body))
    (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(struct.pack(">II", 0x00000801, len(labels)) + labels.astype(np.uint8).tobytes()))


def _bad_idx_folders(root: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 255, (50, 28, 28)), np.arange(50) % 10
    folders = {name: root / name for name in ("empty", "truncated", "mismatched", "garbage")}
    folders["empty"].mkdir(parents=True)
    _write_idx(folders["truncated"], images, labels, truncate_images=True)
    _write_idx(folders["mismatched"], images, labels[:40])
    folders["garbage"].mkdir(parents=True)
    (folders["garbage"] / "t10k-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    (folders["garbage"] / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip at all")
    return folders


PLUGIN_FAULTS = {
    "fails at import": "raise RuntimeError('broken on purpose')\n",
    "raises when called": """
        def classifier():
            class Boom(nn.Module):
                def forward(self, x):
                    raise ValueError('boom')
            return Boom()
    """,
    "wrong shape": """
        def classifier():
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    """,
    "unannounced logits": """
        classifier_outputs = "probabilities"
        def classifier():
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    """,
    "NaN images": """
        class NaNGenerator(TinyGenerator):
            def decode(self, z):
                return torch.full((len(z), 1, 8, 8), float('nan'))
        def generator():
            return NaNGenerator()
    """,
}


def _cases(tmp_path: Path) -> list[tuple[str, list[str], str]]:
    good = str(write_tiny_plugin(tmp_path))
    plugins = {name: str(write_tiny_plugin(tmp_path, f"bad_{index}.py", extra=body))
               for index, (name, body) in enumerate(PLUGIN_FAULTS.items())}
    folders = _bad_idx_folders(tmp_path / "idx")
    sample = ["sample", "--classifier", good, "--generator", good, "--target", "high:3", "--warmup", "2",
              "--samples", "2"]
    cases = [
        ("zero chains", sample + ["--chains", "0"], "chains per target"),
        ("negative chains", sample + ["--chains", "-3"], "chains per target"),
        ("huge chains", sample + ["--chains", "100000000"], "chains per target"),
        ("sigma zero", sample + ["--sigma", "0"], "sigma (the paper uses 0.05) must be a number from 0.001 to 10"),
        ("sigma negative", sample + ["--sigma", "-0.05"], "sigma (the paper uses 0.05) must be a number from 0.001 to 10"),
        ("sigma nan", sample + ["--sigma", "nan"], "sigma (the paper uses 0.05) must be a number from 0.001 to 10"),
        ("unknown class name", sample[:-6] + ["--target", "high:eleven", "--warmup", "2", "--samples", "2"],
         "unknown class 'eleven'"),
        ("bad target", sample[:-6] + ["--target", "probs:8=0.5", "--warmup", "2", "--samples", "2"],
         "must sum to 1"),
        ("zero samples", sample[:-1] + ["0"], "samples per chain"),
        ("negative independence moves", sample + ["--independence-moves", "-1"], "independence moves"),
    ]
    for name, folder in folders.items():
        cases.append((f"{name} IDX folder", ["--data-dir", str(folder), "data", "info", "mnist"], str(folder)))
        cases.append((f"{name} IDX folder, sampling", ["--data-dir", str(folder)] + sample[:1] + ["--dataset", "mnist"]
                      + sample[1:], str(folder)))
    for name, path in plugins.items():
        role = "--generator" if name == "NaN images" else "--classifier"
        args = ["sample", "--classifier", good, "--generator", good, "--target", "high:3", "--chains", "2",
                "--warmup", "2", "--samples", "2"]
        args[args.index(role) + 1] = path
        expected = {"fails at import": "failed to import", "raises when called": "raised ValueError: boom",
                    "wrong shape": "returns 3 classes", "unannounced logits": 'classifier_outputs = "logits"',
                    "NaN images": "NaN"}[name]
        cases.append((f"plugin that {name}", args, expected))
        cases.append((f"plugin that {name}, Defuse", ["defuse", "identify", role.replace("generator", "vae"), path,
                      "--classifier" if role == "--generator" else "--vae", good, "--max-images", "5"], expected))
    return cases


def test_bad_input_at_each_cli_entry_point_gets_one_line_exit_2_and_changes_nothing(tmp_path, capsys):
    workspace = tmp_path / "ws"
    good = str(write_tiny_plugin(tmp_path))
    # something already stored, which no bad input may change
    assert main(["--workspace", str(workspace), "sample", "--classifier", good, "--generator", good,
                 "--target", "high:3", "--chains", "2", "--warmup", "2", "--samples", "2"]) == 0
    before = _snapshot(workspace)
    for name, args, expected in _cases(tmp_path):
        capsys.readouterr()
        code = main(["--workspace", str(workspace), "--device", "cpu", *args])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2, (name, code, err[-1500:])
        assert len(lines) == 1 and expected in lines[0] and "unexpected" not in lines[0], (name, err[-1500:])
        assert _snapshot(workspace) == before, name


def _snapshot(workspace: Path) -> tuple:
    from probe_core.store import Store

    store = Store(workspace / "probe.sqlite")
    try:
        runs = [(r.id, r.kind, r.status, r.progress) for r in store.list_runs(limit=1000)]
        samples = sum(store.count_samples(r[0]) for r in runs)
        models = sorted(m["id"] for m in store.list_models())
        return runs, samples, models
    finally:
        store.close()


def _probe_page(app_env, **models):
    """The Probe page opened from a URL naming the session's models (``classifier=…``, ``generator=…``), each
    file the link names loaded as an admin does: with the page's Load button."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=120)
    for kind, reference in models.items():
        at.query_params[kind] = reference
    at.run()
    at.switch_page("pages/views/probe.py").run()
    load_linked_files(at, len(models))
    assert not at.exception, at.exception
    return at


def test_bad_input_on_the_probe_page_gets_st_error_and_stores_nothing(app_env, tmp_path):
    store = app_env.store
    before = len(store.list_runs(limit=10_000))
    good = str(write_tiny_plugin(tmp_path))
    # a target spec that does not parse, and a σ of zero, typed into the page
    at = _probe_page(app_env, classifier=good, generator=good)
    at.radio(key="probe_kind").set_value("Spec").run()
    at.text_input(key="probe_spec").set_value("probs:8=0.5").run()
    assert not at.exception and any("must sum to 1" in shown(e.value) for e in at.error), [e.value for e in at.error]
    assert at.button(key="probe_start").disabled
    # every broken plugin, as the session's classifier or generator
    for index, (name, body) in enumerate(PLUGIN_FAULTS.items()):
        path = str(write_tiny_plugin(tmp_path, f"page_bad_{index}.py", extra=body))
        role = "generator" if name == "NaN images" else "classifier"
        at = _probe_page(app_env, **{"classifier": good, "generator": good, role: path})
        assert any(path in shown(e.value) for e in at.error), (name, [e.value for e in at.error])
    missing = str(tmp_path / "no_such_plugin.py")
    at = _probe_page(app_env, classifier=missing, generator=good)
    assert any("not found" in e.value and missing in shown(e.value) for e in at.error), [e.value for e in at.error]
    assert len(store.list_runs(limit=10_000)) == before


def test_a_hostile_reference_in_the_address_is_shown_as_plain_text_not_a_link(app_env):
    """``/?classifier=[Session expired, sign in](https://…)`` is refused and quoted as typed, with no Markdown
    link, image or emphasis formed (security round two, item 6)."""
    from streamlit.testing.v1 import AppTest

    hostile = "[Session expired, sign in](https://evil.example/login)"
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=120)
    at.query_params["classifier"] = hostile
    at.run()
    at.switch_page("pages/views/probe.py").run()
    assert not at.exception
    quoting = [e.value for e in at.error if "Session expired" in e.value]
    assert quoting, [e.value for e in at.error]
    for body in quoting:  # quoted with every bracket and parenthesis escaped, so no link can form
        assert hostile not in body and re.search(r"(?<!\\)\]\(|(?<!\\)\[", body) is None, body


def test_a_link_naming_a_file_imports_nothing_until_the_admin_confirms_it(app_env, tmp_path):
    """``/?classifier=/path/plugin.py`` shows the file (path, size, sha256) with Load and Ignore; nothing is
    imported before Load, and a path that is no plugin or model file is refused whatever exists there."""
    from helpers import load_linked_files, shown, write_tiny_plugin
    from streamlit.testing.v1 import AppTest

    from probe_core.models.plugins import file_sha256

    plugin = write_tiny_plugin(tmp_path, extra="from pathlib import Path as _P\n"
                                               "_P(__file__).with_suffix('.imported').write_text('x')\n")
    marker = plugin.with_suffix(".imported")
    app = str(Path(__file__).resolve().parents[2] / "app.py")
    at = AppTest.from_file(app, default_timeout=120)
    at.query_params["classifier"] = str(plugin)
    at.run()
    at.switch_page("pages/views/probe.py").run()
    assert not at.exception and not marker.exists()  # shown, not imported
    listed = " ".join(c.value for c in at.code)
    assert str(plugin) in listed and file_sha256(plugin) in listed
    assert any("Python code that runs" in w.value for w in at.warning)
    next(b for b in at.button if b.label == "Load it").click().run()
    assert not at.exception and marker.exists()  # the admin chose to load it
    assert at.session_state["classifier_ref:digits"] == f"plugin:{plugin.resolve()}#sha256={file_sha256(plugin)}"

    other = AppTest.from_file(app, default_timeout=120)
    other.query_params["classifier"] = "/etc/passwd"
    other.run()
    other.switch_page("pages/views/probe.py").run()
    assert not other.exception
    assert any("names no plugin (.py) or model file" in shown(e.value) for e in other.error)
    assert other.session_state["classifier_ref:digits"] == "default"


def test_a_link_to_a_model_the_tool_kept_in_the_workspace_opens_at_once(app_env):
    """``show`` (the notebook's) keeps an in-memory model as a file in the workspace and opens the dashboard on
    it: that file is the workspace's own, so the link uses it without asking."""
    import torch
    from streamlit.testing.v1 import AppTest

    from probe_core.models.kept import keep_classifier

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    reference = keep_classifier(app_env.root, net, [str(k) for k in range(10)], (1, 8, 8))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=120)
    at.query_params["classifier"] = reference
    at.run()
    at.switch_page("pages/views/probe.py").run()
    assert not at.exception
    assert at.session_state["classifier_ref:digits"] == reference and not at.code  # no confirmation asked
