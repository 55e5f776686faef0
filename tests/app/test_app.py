"""AppTest of the dashboard's Home page against a workspace with the trained default models."""

import time
from pathlib import Path

from helpers import shown
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_home_shows_data_models_and_samples(app_env):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert at.title[0].value.endswith("Model Probe")
    table = at.dataframe[0].value
    assert set(table["kind"]) >= {"classifier", "vae", "gan"}
    default = app_env.registry.default_id("digits", "classifier")
    assert table.loc[table["id"] == default, "test accuracy"].iloc[0] > 0.9
    # each model's check where the model is: the classifier's accuracy, the default VAE's verdict with its reasons
    assert "%" in table.loc[table["id"] == default, "check"].iloc[0]
    vae = app_env.registry.default_id("digits", "vae")
    assert table.loc[table["id"] == vae, "check"].iloc[0].startswith("ok")
    assert len(at.image) >= 3  # the test-image grid and one grid per generator


def test_home_trains_a_model_from_the_form(app_env):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not [m for m in at.multiselect if m.key == "train_classes"]  # "all": no class picker shown
    at.radio(key="train_subset_mode").set_value("all except").run()
    at.selectbox(key="train_kind").select("classifier")
    assert at.multiselect(key="train_classes").label == "Classes to leave out"
    at.multiselect(key="train_classes").select("7")
    from probe_core.models.spec import MODEL_RANGES
    from probe_core.runs.scaleout import SHARDS_RANGE

    # the widgets' bounds are the model spec's and the scale-out ranges, not the page's (0: the default)
    assert (at.number_input(key="train_epochs").min, at.number_input(key="train_epochs").max) == (
        0, MODEL_RANGES["epochs"][1])
    assert (at.number_input(key="train_seed").min, at.number_input(key="train_seed").max) == MODEL_RANGES["seed"]
    # the latent size a weak generator's advice names is in the form (0: the data set's default)
    assert (at.number_input(key="train_latent").min, at.number_input(key="train_latent").max) == (
        0, MODEL_RANGES["latent_dim"][1])
    assert (at.number_input(key="shards").min, at.number_input(key="shards").max) == (0, SHARDS_RANGE[1])
    at.number_input(key="train_epochs").set_value(2)
    at.number_input(key="train_seed").set_value(5)
    at.button(key="train_submit").click().run()
    assert not at.exception
    assert any("Training started" in s.value for s in at.success)
    deadline = time.time() + 60
    while time.time() < deadline:
        models = [m for m in app_env.registry.list() if m["spec"].get("classes") == [0, 1, 2, 3, 4, 5, 6, 8, 9]]
        if models:
            break
        time.sleep(0.5)
    assert models and models[0]["spec"]["seed"] == 5


def test_the_train_form_takes_every_setting_a_fix_command_names(app_env):
    """Epochs, latent size, KL warm-up, β and seed (what `probe models train` and the fix button take) reach the
    trained VAE's recipe; left empty, KL warm-up and β are the recipe's."""
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="train_kind").select("vae")
    assert at.number_input(key="train_kl_warmup").value is None and at.number_input(key="train_beta").value is None
    for key, value in (("train_epochs", 2), ("train_latent", 3), ("train_kl_warmup", 1), ("train_beta", 2.5),
                       ("train_seed", 11)):
        at.number_input(key=key).set_value(value)
    at.button(key="train_submit").click().run()
    assert not at.exception and any("Training started" in s.value for s in at.success)
    deadline, models = time.time() + 60, []
    while time.time() < deadline and not models:
        models = [m for m in app_env.registry.list(kind="vae") if m["spec"]["seed"] == 11]
        time.sleep(0.5)
    assert models, "the VAE of the form was not trained"
    spec = models[0]["spec"]
    assert (spec["epochs"], spec["latent_dim"], spec["kl_warmup"], spec["beta"]) == (2, 3, 1, 2.5)


def test_missing_data_folder_is_a_message_not_a_traceback(app_env, monkeypatch):
    monkeypatch.delenv("PROBE_DATA_DIR", raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="dataset").select("mnist").run()
    assert not at.exception
    assert any("PROBE_DATA_DIR" in shown(e.value) for e in at.error)


def test_a_plugin_path_is_checked_where_it_is_typed(app_env, tmp_path):
    from helpers import write_tiny_plugin

    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="classifier_pick:digits").select("plugin file…").run()
    missing = str(tmp_path / "nowhere.py")
    at.text_input(key="classifier_plugin_path:digits").input(missing).run()
    assert any("not found" in e.value and missing in shown(e.value) for e in at.error), [e.value for e in at.error]
    assert "classifier" not in at.query_params  # the session's classifier did not change
    good = str(write_tiny_plugin(tmp_path))
    at.text_input(key="classifier_plugin_path:digits").input(good).run()
    assert not at.error and at.query_params["classifier"].startswith(f"plugin:{Path(good).resolve()}#sha256=")


def test_the_dashboard_opens_on_the_data_the_workspace_was_used_on_and_trains_nothing_unasked(tmp_path, monkeypatch):
    """A workspace whose runs were made on the user's .npz opens on it, offered by name first in the sidebar,
    and the digits defaults are not trained (even with auto-training on): only digits chosen trains them."""
    import numpy as np

    from probe_core.catalog import canonical_dataset_name
    from probe_core.runs.workspace import Workspace

    rng = np.random.default_rng(0)
    data = tmp_path / "mine.npz"
    np.savez(data, x=rng.integers(0, 255, (60, 8, 8), dtype=np.uint8), y=np.repeat(np.arange(3), 20))
    reference = canonical_dataset_name(str(data))
    workspace = Workspace(tmp_path / "ws")
    workspace.store.create_run("sample", {"dataset": reference, "target": "high:1"}, status="done")
    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    monkeypatch.setenv("PROBE_AUTOTRAIN", "1")
    monkeypatch.delenv("PROBE_DATASET")
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, at.exception
    assert at.session_state["dataset"] == reference
    assert at.sidebar.selectbox(key="dataset").options[0] == reference  # the user's data first
    assert workspace.store.list_runs(kind="train") == []  # nothing trained that was not asked for
    at.sidebar.selectbox(key="dataset").set_value("digits").run()
    [training] = workspace.store.list_runs(kind="train")
    assert training.config["dataset"] == "digits"
    from probe_core.runs.jobs import JobManager

    JobManager(workspace.store).cancel(training.id)  # the test needs only that it started
    deadline = time.monotonic() + 120
    while workspace.store.get_run(training.id).active and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not workspace.store.get_run(training.id).active


def test_a_fresh_workspace_opens_on_digits_but_trains_only_when_asked_or_chosen(tmp_path, monkeypatch):
    """Someone who came to probe their own .npz names it on a fresh workspace's first view: nothing trains for
    digits on the way (with auto-training on); the Models page offers the digits defaults as one button."""
    import numpy as np

    from pages.ui.session import YOUR_DATA
    from probe_core.catalog import canonical_dataset_name
    from probe_core.runs.workspace import Workspace

    data = tmp_path / "mine.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.integers(0, 255, (60, 8, 8, 3), dtype=np.uint8), y=np.repeat(np.arange(3), 20))
    workspace = Workspace(tmp_path / "ws")
    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    monkeypatch.setenv("PROBE_AUTOTRAIN", "1")
    monkeypatch.delenv("PROBE_DATASET")
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, at.exception
    assert at.session_state["dataset"] == "digits"
    assert any("nothing trains until you choose" in shown(m.value) for m in at.markdown)
    assert any(b.label.startswith("Train the default classifier") for b in at.button)
    at.sidebar.selectbox(key="dataset").set_value(YOUR_DATA).run()
    at.sidebar.text_input(key="data_path").input(str(data)).run()
    at.sidebar.button(key="data_use").click().run()
    assert not at.exception and at.session_state["dataset"] == canonical_dataset_name(str(data))
    assert workspace.store.list_runs(kind="train") == []  # digits was shown, never chosen
    at.sidebar.selectbox(key="dataset").set_value("digits").run()  # chosen now: its defaults train
    [training] = workspace.store.list_runs(kind="train")
    assert training.config["dataset"] == "digits"
    from probe_core.runs.jobs import JobManager

    JobManager(workspace.store).cancel(training.id)
    deadline = time.monotonic() + 120
    while workspace.store.get_run(training.id).active and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not workspace.store.get_run(training.id).active
