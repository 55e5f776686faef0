"""Every page with a plugin classifier and generator (and a plugin oracle on Label): Bayes-TrEx and Defuse."""

from pathlib import Path

from helpers import load_linked_files, rerun_until, write_tiny_plugin
from streamlit.testing.v1 import AppTest

from probe_core.defuse import queries

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _page(page: str, **models) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for kind, reference in models.items():  # the session's models, as a URL names them
        at.query_params[kind] = reference
    at.run()
    at.switch_page(page).run()
    load_linked_files(at, len(models))  # a file named in the address loads when an admin says so
    assert not at.exception, at.exception
    return at


def test_defuse_pages_work_end_to_end_with_plugin_models(workspace, monkeypatch, tmp_path):
    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    model = str(write_tiny_plugin(tmp_path, "model.py"))
    oracle = str(write_tiny_plugin(tmp_path, "oracle.py", extra="""
        def classifier():
            torch.manual_seed(7)
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    """))
    session = {"classifier": model, "generator": model}
    store = workspace.store

    at = _page("pages/views/failures.py", **session)
    at.number_input(key="defuse_q").set_value(10)
    at.number_input(key="defuse_m").set_value(2)
    at.number_input(key="defuse_k").set_value(6)
    at.number_input(key="defuse_max_samples").set_value(500)
    at.button[0].click().run()  # the form's "Find failures"
    assert not at.error, [e.value for e in at.error]
    rerun_until(at, lambda a: any(r.status == "done" for r in store.list_runs(kind=queries.DISTILL)))
    identify = store.list_runs(kind=queries.IDENTIFY)[0]
    assert identify.config["classifier"].startswith("plugin:/") and "#sha256=" in identify.config["vae"]
    distill_run = store.list_runs(kind=queries.DISTILL)[0].id

    at = _page("pages/views/label.py", **session)
    at.text_input(key="label_oracle").set_value(oracle)
    at.button(key="label_auto").click().run()
    assert not at.error and any("clusters labelled as oracle:plugin:" in s.value for s in at.success), \
        [e.value for e in at.error]

    at = _page("pages/views/finetune.py", **session)
    source = next(option for option in at.selectbox(key="finetune_source").options if option.startswith("oracle:"))
    at.selectbox(key="finetune_source").set_value(source).run()
    at.text_input(key="finetune_lambdas").set_value("1,10")
    at.number_input(key="finetune_epochs").set_value(1)
    at.number_input(key="finetune_per_region").set_value(16)
    at.button[0].click().run()
    rerun_until(at, lambda a: any(r.status == "done" for r in store.list_runs(kind=queries.CORRECT)))
    corrected = store.list_runs(kind=queries.CORRECT)[0].result["corrected_model"]
    assert corrected.startswith("plugin-model-") and workspace.registry.load(corrected).kind == "classifier"
    assert store.list_runs(kind=queries.CORRECT)[0].config["distill_run"] == distill_run


def test_bayestrex_pages_work_with_plugin_models(workspace, monkeypatch, tmp_path):
    """Probe, Ambiguity matrix, Interpolation, Compare and Saliency on a plugin classifier and generator."""
    from probe_core.models import ModelSpec
    from probe_core.runs.runconfig import config_of

    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    model = str(write_tiny_plugin(tmp_path, "model.py"))
    session = {"classifier": model, "generator": model}
    store = workspace.store

    at = _page("pages/views/probe.py", **session)
    at.number_input(key="probe_chains").set_value(4)
    at.number_input(key="probe_warmup").set_value(10)
    at.number_input(key="probe_samples").set_value(10)
    at.button(key="probe_start").click().run()
    rerun_until(at, lambda a: any(r.status == "done" for r in store.list_runs(kind="sample")))
    probe_run = store.list_runs(kind="sample")[0]
    assert config_of(probe_run).classifier.startswith("plugin:/") and config_of(probe_run).generator == \
        config_of(probe_run).classifier

    at = _page("pages/views/matrix.py", **session)
    for key, value in (("matrix_chains", 2), ("matrix_warmup", 10), ("matrix_samples", 10), ("matrix_keep", 1)):
        at.number_input(key=f"{key}:digits").set_value(value)
    next(b for b in at.button if b.label.startswith("Build the")).click().run()
    rerun_until(at, lambda a: any("pairs reached" in c.value for c in a.caption), timeout=240)
    matrix_run = store.list_runs(kind="sample")[0]
    assert matrix_run.id != probe_run.id and matrix_run.status == "done"
    assert config_of(matrix_run).classifier == config_of(probe_run).classifier  # the plugin, not a default
    # every pair of the 10 classes, 2 chains x 10 kept draws each
    assert len(store.get_samples(matrix_run.id)) == 45 * 2 * 10

    at = _page("pages/views/interpolation.py", **session)
    for key, value in (("path_steps", 3), ("path_chains", 2), ("path_iterations", 10)):
        at.number_input(key=key).set_value(value)
    next(b for b in at.button if b.label == "Sample the path").click().run()
    rerun_until(at, lambda a: any("Best sample per step" in c.value for c in a.caption), timeout=180)
    path_run = store.list_runs(kind="sample")[0]
    assert path_run.id != matrix_run.id and path_run.status == "done"
    assert config_of(path_run).classifier == config_of(probe_run).classifier
    assert len(at.image) >= 1  # the strip of best samples along the path

    other = workspace.registry.get_or_train(ModelSpec(dataset="digits", kind="classifier", epochs=1))
    at = _page("pages/views/compare.py", **session)
    assert at.selectbox(key="compare_a").value.startswith("plugin:/")
    at.selectbox(key="compare_b").set_value(other.id)
    for key, value in (("compare_chains", 2), ("compare_warmup", 10), ("compare_samples", 10)):
        at.number_input(key=key).set_value(value)
    next(b for b in at.button if b.label == "Sample both").click().run()
    rerun_until(at, lambda a: any(s.value.startswith("Accuracy on") for s in a.subheader), timeout=240)
    from probe_core.bayestrex.compare import COMPARE

    [compare_run] = store.list_runs(kind=COMPARE)
    assert compare_run.status == "done"
    assert config_of(compare_run).classifiers == [config_of(probe_run).classifier, other.id]

    at = _page("pages/views/saliency.py", **session)
    assert not at.error, [e.value for e in at.error]
    # the image and the plugin classifier's heat map for the class it predicts
    captions = [image.proto.imgs[0].caption for image in at.image]
    explained = next(box for box in at.selectbox if box.label == "Explain class").value
    assert captions[0] == "image" and captions[1].startswith(f"SmoothGrad for {explained} (p = ")
    at.radio(key="saliency_source").set_value("generated sample (Probe run)").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(c.value.startswith("Sample ") for c in at.caption)  # a stored sample of a Probe run is explained
    assert [image.proto.imgs[0].caption for image in at.image][1].startswith("SmoothGrad for ")
