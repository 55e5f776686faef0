"""Failures, Label and Finetune pages with a plugin classifier, a plugin generator and a plugin oracle."""

from pathlib import Path

from helpers import write_tiny_plugin
from streamlit.testing.v1 import AppTest
from test_pages import rerun_until

from probe_core.defuse import pipeline

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _page(page: str, **models) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for kind, reference in models.items():  # the session's models, as a URL names them
        at.query_params[kind] = reference
    at.run()
    at.switch_page(page).run()
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
    rerun_until(at, lambda a: any(r.status == "done" for r in store.list_runs(kind=pipeline.DISTILL)))
    identify = store.list_runs(kind=pipeline.IDENTIFY)[0]
    assert identify.config["classifier"].startswith("plugin:/") and "#sha256=" in identify.config["vae"]
    distill_run = store.list_runs(kind=pipeline.DISTILL)[0].id

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
    rerun_until(at, lambda a: any(r.status == "done" for r in store.list_runs(kind=pipeline.CORRECT)))
    corrected = store.list_runs(kind=pipeline.CORRECT)[0].result["corrected_model"]
    assert corrected.startswith("plugin-model-") and workspace.registry.load(corrected).kind == "classifier"
    assert store.list_runs(kind=pipeline.CORRECT)[0].config["distill_run"] == distill_run
