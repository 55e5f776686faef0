"""AppTest of the dashboard's Home page against a workspace with the trained default models."""

import time
from pathlib import Path

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
    assert len(at.image) >= 3  # the test-image grid and one grid per generator


def test_home_trains_a_model_from_the_form(app_env):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not [m for m in at.multiselect if m.key == "train_classes"]  # "all": no class picker shown
    at.radio(key="train_subset_mode").set_value("all except").run()
    at.selectbox(key="train_kind").select("classifier")
    assert at.multiselect(key="train_classes").label == "Classes to leave out"
    at.multiselect(key="train_classes").select("7")
    from probe_core.models.registry import MODEL_RANGES
    from probe_core.runs.scaleout import SHARDS_RANGE

    # the widgets' bounds are the model spec's and the scale-out ranges, not the page's (0: the default)
    assert (at.number_input(key="train_epochs").min, at.number_input(key="train_epochs").max) == (
        0, MODEL_RANGES["epochs"][1])
    assert (at.number_input(key="train_seed").min, at.number_input(key="train_seed").max) == MODEL_RANGES["seed"]
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


def test_missing_data_folder_is_a_message_not_a_traceback(app_env, monkeypatch):
    monkeypatch.delenv("PROBE_DATA_DIR", raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="dataset").select("mnist").run()
    assert not at.exception
    assert any("PROBE_DATA_DIR" in e.value for e in at.error)


def test_a_plugin_path_is_checked_where_it_is_typed(app_env, tmp_path):
    from helpers import write_tiny_plugin

    at = AppTest.from_file(APP, default_timeout=60).run()
    at.selectbox(key="classifier_pick:digits").select("plugin file…").run()
    missing = str(tmp_path / "nowhere.py")
    at.text_input(key="classifier_plugin_path:digits").input(missing).run()
    assert any("not found" in e.value and missing in e.value for e in at.error), [e.value for e in at.error]
    assert "classifier" not in at.query_params  # the session's classifier did not change
    good = str(write_tiny_plugin(tmp_path))
    at.text_input(key="classifier_plugin_path:digits").input(good).run()
    assert not at.error and at.query_params["classifier"].startswith(f"plugin:{Path(good).resolve()}#sha256=")
