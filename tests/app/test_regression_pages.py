"""AppTest of the regression suite in the dashboard: the Regressions page, adding checks from Label and Probe,
and Finetune's offer to score the corrected classifier."""

from pathlib import Path

from helpers import rerun_until
from streamlit.testing.v1 import AppTest

from probe_core import suites
from probe_core.bayestrex.request import SampleRequest
from probe_core.defuse import labels as label_tools
from probe_core.runs.lifecycle import run_now

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def open_page(page: str, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120).run()
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_the_regressions_page_shows_both_versions_and_a_cell_opens_the_check(app_env, regression_suite):
    original, corrected = regression_suite["original"], regression_suite["corrected"]
    at = open_page("pages/views/regressions.py", suite_name=regression_suite["suite"])
    assert at.selectbox(key="regressions_suite").value == regression_suite["suite"]
    assert {original, corrected} <= set(at.selectbox(key="regressions_version").options)
    assert at.get("plotly_chart")  # the checks × versions matrix
    at.selectbox(key="regressions_check").set_value(regression_suite["region"])
    at.selectbox(key="regressions_version").set_value(original).run()
    assert int(_metric(at, "Accuracy").rstrip(" %")) < 50
    assert any("are not called what people said" in c.value for c in at.caption)
    at.selectbox(key="regressions_version").set_value(corrected).run()
    assert int(_metric(at, "Accuracy").rstrip(" %")) > 50
    # scoring another version is a background job; its column appears when it ends
    default = app_env.registry.default_id("digits", "classifier")
    at.selectbox(key="regressions_classifier").set_value(default)
    next(b for b in at.button if b.label == "Score").click().run()
    rerun_until(at, lambda a: default in a.selectbox(key="regressions_version").options)
    assert not at.error


def test_a_labelled_failure_region_is_added_from_the_label_page(app_env, flawed_run):
    store, run_id = app_env.store, flawed_run["distill_run"]
    clusters = store.get_clusters(run_id)
    # the cluster fewest people labelled so far (other tests label some): three more decide it
    position, cluster = min(enumerate(clusters), key=lambda item: len(store.get_labels(
        cluster_id=item[1]["id"], source=label_tools.HUMAN)))
    at = open_page("pages/views/label.py", label_position=position)
    at.selectbox(key="label_run_pick").set_value(run_id).run()
    images = store.get_review_images(cluster["id"])  # made by the page on first view
    # a class the classifier gives none of the images (the flawed classifier splits some clusters between 8 and 9)
    wrong = str(next(c for c in range(10) if c not in {int(i["prediction"]) for i in images}))
    for person in ("p1", "p2", "p3"):  # three people say every image shows another class than predicted
        label_tools.label_images(store, [i["id"] for i in images], person, wrong, tuple(str(c) for c in range(10)))
    at.run()
    before = len(store.get_suite_checks("label-page-suite", with_data=False))
    at.text_input(key="label_suite").input("label-page-suite").run()
    at.button(key=f"label_add_check_{cluster['id']}").click().run()
    assert not at.error, [e.value for e in at.error]
    checks = store.get_suite_checks("label-page-suite")
    assert len(checks) == before + 1
    assert checks[-1]["kind"] == suites.REGION and set(suites.label_names(checks[-1])) == {wrong}


def test_labelled_hits_are_added_from_the_probe_page(app_env):
    registry, store = app_env.registry, app_env.store
    run_id, _ = run_now(registry, SampleRequest(
        dataset="digits", target="high:2", class_names=tuple("0123456789"), classifier=registry.default_id("digits", "classifier"),
        generator=registry.default_id("digits", "generator"), chains=2, warmup=20, samples=10))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["annotator"] = "prober"
    at.run()
    at.switch_page("pages/views/probe.py").run()
    at.selectbox(key="probe_run_pick").set_value(run_id).run()
    hit = next(s for s in store.get_samples(run_id) if s["hit"])
    at.selectbox(key=f"probe_finding_{hit['id']}_prober").select("7").run()
    assert [entry["label"] for entry in store.get_labels(sample_id=hit["id"])] == ["7"]  # saved at once
    at.text_input(key="probe_suite").input("probe-page-suite").run()
    at.button(key=f"probe_add_check_{run_id}").click().run()
    assert not at.error, [e.value for e in at.error]
    check = store.get_suite_checks("probe-page-suite")[-1]
    assert check["kind"] == suites.FINDING and suites.label_names(check) == ["7"]
    assert check["evidence"]["sample_ids"] == [hit["id"]]


def test_finetune_offers_to_score_the_corrected_classifier_on_the_suite(app_env, regression_suite, flawed_run):
    at = open_page("pages/views/finetune.py", suite_name=regression_suite["suite"])
    at.selectbox(key="finetune_run_pick").set_value(flawed_run["distill_run"]).run()
    assert at.selectbox(key="finetune_suite").value == regression_suite["suite"]
    before = len(app_env.store.list_runs(kind=suites.SCORE_KIND))
    at.button(key="finetune_score").click().run()
    assert len(app_env.store.list_runs(kind=suites.SCORE_KIND)) > before
    rerun_until(at, lambda a: not any(r.active for r in app_env.store.list_runs(kind=suites.SCORE_KIND)))
    at.run()
    assert any("is scored on" in s.value for s in at.success), [s.value for s in at.success]
