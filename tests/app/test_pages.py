"""AppTest of every dashboard page: it renders without exception and its main path works."""

import re
from pathlib import Path

import pytest
from helpers import rerun_until, shown
from streamlit.testing.v1 import AppTest

from probe_core.api import ui as page_api
from probe_core.bayestrex.latent_map import latent_map
from probe_core.bayestrex.request import PATH_PAGE_DEFAULTS
from probe_core.catalog import load_dataset
from probe_core.defuse import identify_step
from probe_core.defuse import labels as label_tools
from probe_core.defuse import queries, review, steps
from probe_core.defuse.cluster import REVIEW_TAU
from probe_core.defuse.correction import PAPER_LAMBDAS
from probe_core.models import ModelSpec
from probe_core.progress import SILENT
from probe_core.runs.requests import SAMPLE_RANGES, SIGMA_RANGE
from probe_core.sampling.targets import DEFAULT_SIGMA, PathKind

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def open_page(page: str, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120).run()
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def _workspace_without(source, root: Path, leave_out):
    """A new workspace holding ``source``'s models except those ``leave_out(record)`` names."""
    import shutil

    from probe_core.runs.workspace import Workspace

    workspace = Workspace(root)
    for model in source.registry.list():
        if leave_out(model):
            continue
        record = source.store.get_model(model["id"])
        path = workspace.registry.models_dir / Path(record["path"]).name
        shutil.copy(record["path"], path)
        workspace.store.put_model(model["id"], record["kind"], record["dataset"], str(path), record["spec"],
                                  record["metrics"])
    return workspace


def test_probe_runs_a_small_target_live_and_shows_hits(app_env):
    at = open_page("pages/views/probe.py")
    at.selectbox(key="probe_high").select("3")
    at.number_input(key="probe_chains").set_value(8)
    at.number_input(key="probe_warmup").set_value(40)
    at.number_input(key="probe_samples").set_value(30)
    at.number_input(key="probe_keep").set_value(1)
    at.number_input(key="probe_jumps").set_value(2)
    at.button(key="probe_start").click().run()
    assert not at.exception
    run = app_env.store.list_runs(kind="sample")[0]
    assert run.config["target"] == "high:3" and run.config["independence_moves"] == 2
    rerun_until(at, lambda a: any(s.value == f"Run {run.id}: high:3" for s in a.subheader)
                and app_env.store.get_run(run.id).status == "done" and any("Summary" in s.value for s in a.subheader))
    assert app_env.store.count_samples(run.id) == 8 * 30
    result = app_env.store.get_run(run.id).result["targets"][0]
    summary = at.dataframe[0].value
    assert summary["target"].iloc[0] == result["description"] == "high confidence in 3"
    assert summary["status"].iloc[0].startswith("ok") and summary["hit rate"].iloc[0] == pytest.approx(result["hit_rate"])
    assert result["hit_rate"] > 0.5, result["summary"]
    assert any(s.value.startswith("Hits (") for s in at.subheader)
    assert len(at.image) >= 2
    # each hit beside its nearest training image; the digits VAE's hits are new, not copies (issue 98)
    placed = result["provenance"]
    assert placed["measured"] > 40 and not placed["copying"] and placed["near_copy_share"] < 0.3
    assert summary["near copies"].iloc[0] == f"{placed['near_copy_share']:.0%}"
    [beside] = [e for e in at.expander if "beside its nearest training image" in e.label]
    assert len(beside.image) >= 2
    # the inspector reaches every stored hit, not only the 40 in the gallery (over 120 hits here)
    stored_hits = sum(s["hit"] for s in app_env.store.get_samples(run.id))
    assert stored_hits > 40
    assert at.slider(key=f"probe_inspect_{run.id}_0").max == stored_hits - 1
    # the latent map is a job (the CLI test runs it); here it is computed in this process to save a worker
    assert any(b.key == f"probe_map_{run.id}" for b in at.button)
    latent_map(app_env.store, run.id)
    at.run()
    assert any(c.key == f"probe_latent_map_{run.id}" for c in at.get("plotly_chart"))


def test_probe_page_trains_what_a_paper_use_case_needs_then_runs_it(trained_workspace, tmp_path, monkeypatch):
    app_env = _workspace_without(trained_workspace, tmp_path / "ws", lambda model: model["spec"].get("ambiguous"))
    monkeypatch.setenv("PROBE_WORKSPACE", str(app_env.root))
    needed = ModelSpec(dataset="digits", kind="classifier", ambiguous=True).resolved(load_dataset("digits")).model_id()
    assert not app_env.registry.exists(needed)  # so the page must offer to train it
    at = open_page("pages/views/probe.py")
    at.selectbox(key="probe_use_case").select("always-ambiguous").run()
    assert at.radio(key="probe_uc_generator").value == "gan"  # the paper's generator
    assert any("ambiguous:0,1;ambiguous:1,2" in c.value for c in at.caption)
    assert not any(b.key == "probe_uc_start" for b in at.button)  # nothing to run before the model exists
    at.button(key="probe_uc_train").click().run()  # lookups never train: training is this explicit job
    train = app_env.store.list_runs(kind="train")[0]
    assert any(spec["ambiguous"] for spec in train.config["specs"])
    # the model is stored before its run records that it is done: wait for both
    rerun_until(at, lambda a: any(b.key == "probe_uc_start" for b in a.button)
                and app_env.store.get_run(train.id).status == "done", timeout=180)
    assert app_env.registry.exists(needed)
    for key, value in (("probe_chains", 2), ("probe_warmup", 10), ("probe_samples", 10)):
        at.number_input(key=key).set_value(value)
    at.button(key="probe_uc_start").click().run()
    assert not at.exception
    run = app_env.store.list_runs(kind="sample")[0]
    assert run.config["target"].count("ambiguous:") == 10 and "-ambiguous-" in run.config["classifier"]
    assert run.config["generator"] == app_env.registry.default_id("digits", "gan")
    rerun_until(at, lambda a: app_env.store.get_run(run.id).status == "done", timeout=180)


def test_probe_lists_confident_test_set_mistakes_for_people_to_judge(app_env, flawed_run):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["classifier"] = flawed_run["classifier"]  # 9s called 8: confident mistakes on the test set
    at.query_params["annotator"] = "judge"
    at.run()
    at.switch_page("pages/views/probe.py").run()
    at.selectbox(key="probe_high").select("8")
    for key, value in (("probe_chains", 2), ("probe_warmup", 10), ("probe_samples", 10)):
        at.number_input(key=key).set_value(value)
    # the judge is one of the workspace's other classifiers of the data, never the probed one
    clean = app_env.registry.default_id("digits", "classifier")
    judges = at.selectbox(key="probe_judge_digits")
    assert judges.value == "none" and clean in judges.options and flawed_run["classifier"] not in judges.options
    judges.select(clean)
    at.button(key="probe_start").click().run()
    run = app_env.store.list_runs(kind="sample")[0]
    assert run.config["judge"] == clean
    rerun_until(at, lambda a: app_env.store.get_run(run.id).status == "done"
                and any("Summary" in s.value for s in a.subheader))
    judged = app_env.store.get_run(run.id).result["targets"][0]["judge_agreement"]
    assert at.dataframe[0].value["judge agrees"].iloc[0] == f"{judged['agreed']}/{judged['judged']}"
    mistakes = app_env.store.get_run(run.id).result["targets"][0]["test_set_baseline"]["confident_mistakes"]
    assert mistakes["count"] > 0 and all(label != 8 for label in mistakes["labels"])
    assert any("misclassification test-set baseline" in e.label for e in at.expander)
    first = mistakes["indices"][0]
    at.radio(key=f"probe_verdict_digits_{first}_judge").set_value("mislabel").run()
    assert [(v["annotator"], v["label"]) for v in app_env.store.get_test_image_labels("digits", first)] == [
        ("judge", "mislabel")]


def test_probe_rejects_a_malformed_spec_with_a_message(app_env):
    at = open_page("pages/views/probe.py")
    at.radio(key="probe_kind").set_value("Spec").run()
    at.text_input(key="probe_spec").input("probs:8=0.7,9=0.2").run()
    assert not at.exception
    assert any("sum to 1" in shown(e.value) for e in at.error)
    assert at.button(key="probe_start").disabled
    # the sampler widgets' bounds are the request module's ranges, not the page's
    for key, name in (("probe_chains", "chains"), ("probe_warmup", "warmup"), ("probe_samples", "samples"),
                      ("probe_seed", "seed")):
        assert (at.number_input(key=key).min, at.number_input(key=key).max) == SAMPLE_RANGES[name], key
    sigma = at.number_input(key="probe_sigma")
    assert (sigma.min, sigma.max, sigma.value) == (*SIGMA_RANGE, DEFAULT_SIGMA)


def test_failures_page_shows_clusters_and_starts_identification(app_env, flawed_run, monkeypatch):
    at = open_page("pages/views/failures.py")
    assert any(m.label == "Clusters kept" for m in at.metric)
    assert len(at.image) >= 3
    # each card's words count what its ten shown samples are called, not what its failures were called
    said = [c.value for c in at.caption if c.value.startswith("On these 10 samples the classifier says ")]
    assert said and len(said) == len([m for m in at.markdown if m.value.startswith("**Cluster ")])
    for words in said:
        counts = re.findall(r"\*\*[^*]+\*\* (\d+)×", words.split(". Over all its failures")[0])
        assert sum(map(int, counts)) == 10, words
    # the widgets offer exactly what the requests accept
    for key, request_type, name in (("defuse_q", steps.IdentifyRequest, "samples_per_image"),
                                    ("defuse_k", steps.DistillRequest, "n_components"),
                                    ("defuse_judge_sure", steps.IdentifyRequest, "judge_sure")):
        widget = at.number_input(key=key)
        assert (widget.min, widget.max) == request_type.ranges[name], key
    assert at.number_input(key="defuse_judge_sure").value is None  # empty: the judge's own threshold
    scale = next(widget for widget in at.number_input if widget.label == "Noise scale (sd)")
    assert (scale.min, scale.max, scale.value) == (*steps.IdentifyRequest.ranges["noise_scale"], 0.15)
    # a judge is one of the workspace's other classifiers of the data (never a typed path: a plugin runs code),
    # never the probed one
    probed = next(re.search(r"Classifier `([^`]+)`", c.value).group(1) for c in at.caption
                  if c.value.startswith("Classifier `"))
    judges = next(s for s in at.selectbox if s.label == "Judge")
    # the default first (from 32x32 up the generator's feature network, below that none), then none
    assert judges.options[:2] == ["default (chosen from the image size)", "none"] and judges.index == 0
    assert probed not in judges.options
    assert set(judges.options[2:]) == set(app_env.registry.classifier_choices("digits")) - {probed}
    # τ's default comes from the page's data set (small images here), its widget kept per data set
    tau = next(widget for widget in at.number_input if widget.label == "Review spread (τ)")
    assert (tau.min, tau.max, tau.value) == (*steps.DistillRequest.ranges["tau"], REVIEW_TAU)
    before = {r.id for r in app_env.store.list_runs(kind=queries.DISTILL)}
    at.number_input(key="defuse_q").set_value(10)
    at.number_input(key="defuse_m").set_value(2)
    at.number_input(key="defuse_max_samples").set_value(300)
    next(b for b in at.button if b.label == "Find failures").click().run()
    assert not at.exception
    rerun_until(at, lambda a: {r.id for r in app_env.store.list_runs(kind=queries.DISTILL)
                               if r.status == "done"} - before != set())
    # one identification run whose request says the distillation that follows it
    identify = max(app_env.store.list_runs(kind=queries.IDENTIFY), key=lambda r: r.id)
    assert identify.config["distill_after"]["max_samples"] == 300 and identify.job["kind"] == queries.IDENTIFY


def test_failure_map_answers_a_hovered_point_with_its_image(app_env, flawed_run):
    import json

    run_id = flawed_run["distill_run"]
    review.embedding(app_env.registry, app_env.store, run_id, max_fit=600, max_points=3000)
    failures = queries.failures_of(app_env.store, run_id)
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("pages/views/failures.py")
    at.session_state["defuse_distill_pick"] = run_id
    at.session_state[f"defuse_map_hover_{run_id}"] = {"hover": 3}  # what the browser sends on hovering failure 3
    at.run()
    assert not at.exception, at.exception
    [component] = at.get("bidi_component")
    answer = json.loads(component.proto.json)["image"]
    assert answer["id"] == 3 and answer["src"].startswith("data:image/png;base64,")
    assert answer["caption"] == (f"failure 3: predicted {failures.predictions[3]}, true {failures.true_labels[3]}")
    at.session_state[f"defuse_map_hover_{run_id}"] = {"hover": -1}  # the first training image
    at.run()
    assert json.loads(at.get("bidi_component")[0].proto.json)["image"]["caption"].startswith("training image 0, class ")
    # the map: lasso and box selection, the legend clear of the tool bar, one colour per cluster, and
    # cluster numbers as on the Label page (1-based)
    chart = at.get("plotly_chart")[0].proto
    spec = json.loads(chart.spec)
    assert set(chart.selection_mode) == {0, 1, 2}  # points, box and lasso
    assert spec["layout"]["legend"]["orientation"] == "h" and spec["layout"]["legend"]["y"] < 0
    clusters = [t for t in spec["data"] if t.get("name", "").startswith("cluster ")]
    assert len({t["marker"]["color"] for t in clusters}) == len(clusters) > 10
    numbers = sorted(int(t["name"].split()[1]) for t in clusters)
    stored = sorted(c["cluster_index"] + 1 for c in app_env.store.get_clusters(run_id))
    assert set(numbers) <= set(stored) and min(numbers) >= 1
    assert any(m.value.startswith(f"**Cluster {stored[0]}** (id ") for m in at.markdown)
    # a cluster chosen to highlight is drawn large and last (on top); every other failure faint and grey
    chosen = sorted(int(t["name"].split()[1]) for t in clusters)[1] - 1
    at.selectbox(key=f"defuse_map_highlight_{run_id}").set_value(chosen).run()
    assert not at.exception, at.exception
    traces = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    assert traces[-1]["name"] == f"cluster {chosen + 1}" and traces[-1]["marker"]["size"] == 8
    assert {t["marker"]["color"] for t in traces[1:-1]} == {"grey"}


def _my_image_labels(store, cluster_id: int, annotator: str) -> dict[int, str]:
    return {label["review_image_id"]: label["label"]
            for label in store.get_labels(cluster_id=cluster_id, source=label_tools.HUMAN, per_image=True)
            if label["annotator"] == annotator}


def test_label_page_labels_all_ten_images_at_once_then_one_by_one(app_env, flawed_run):
    at = open_page("pages/views/label.py")
    at.selectbox(key="label_run_pick").set_value(flawed_run["distill_run"])
    at.text_input(key="annotator").input("page-tester").run()
    cluster = app_env.store.get_clusters(flawed_run["distill_run"])[0]
    images = app_env.store.get_review_images(cluster["id"])
    assert len(images) == label_tools.REVIEW_IMAGES  # made and stored on first view
    at.button(key="label_all_9").click().run()  # the fast path (key 9 in the browser)
    assert not at.exception
    assert set(_my_image_labels(app_env.store, cluster["id"], "page-tester").values()) == {"9"}
    assert any("all 10 images" in s.value for s in at.success)
    third = images[2]["id"]
    at.selectbox(key=f"label_image_{third}_page-tester_1").select("none of the above").run()
    mine = _my_image_labels(app_env.store, cluster["id"], "page-tester")
    assert len(mine) == 10 and mine[third] == "none" and sorted(mine.values()).count("9") == 9
    table = next(d.value for d in at.dataframe if "differ from classifier" in d.value.columns)
    row = table[table["cluster"] == cluster["id"]].iloc[0]
    assert row["images labelled"] == 10
    assert any(chart.key == "label_agreement" for chart in at.get("plotly_chart"))
    at.toggle(key="label_novelty").set_value(True).run()  # is the failure new? (paper Fig. 6)
    novelty = next(d.value for d in at.dataframe if "ℓ2 distance" in d.value.columns)
    assert len(novelty) == label_tools.REVIEW_IMAGES and (novelty["its label"] != novelty["classifier says"]).all()
    pictures = len(at.image)
    at.selectbox(key=f"label_closer_{cluster['id']}").set_value(4)
    at.toggle(key="label_sources").set_value(True).run()  # each review image beside the training image it came from
    assert not at.exception, at.exception
    sources = review.review_sources(app_env.registry, app_env.store, flawed_run["distill_run"], cluster)
    assert len(at.image) == pictures + 2  # the source at full size, and all ten over their sources
    captions = " ".join(caption for element in at.image for caption in element.captions)
    assert f"training image {sources['index'][3]}, labelled" in captions and "review image 4:" in captions


def test_label_page_with_many_classes_labels_all_ten_images_from_a_searchable_list(app_env, flawed_run, monkeypatch):
    # 43 sign classes would be 44 buttons: above ONE_CLICK_CLASSES the page offers the names as a list instead (the
    # page reads it through probe_core.api.ui, its door into probe_core)
    monkeypatch.setattr(page_api, "ONE_CLICK_CLASSES", 4)
    clusters = app_env.store.get_clusters(flawed_run["distill_run"])
    # a cluster no other test counts the annotators of (they take the first two and the last)
    position = len(clusters) // 2
    cluster = clusters[position]
    at = open_page("pages/views/label.py", label_position=position)
    at.selectbox(key="label_run_pick").set_value(flawed_run["distill_run"])
    at.text_input(key="annotator").input("many-classes").run()
    assert any(h.value.startswith(f"Cluster {cluster['cluster_index'] + 1} (id {cluster['id']})") for h in at.subheader)
    assert not [b for b in at.button if b.key in {f"label_all_{index}" for index in range(10)}]
    assert any("Type a class's name" in m.value for m in at.markdown)
    at.selectbox(key=f"label_all_pick_{cluster['id']}_many-classes_0").select("4").run()
    assert not at.exception, at.exception
    assert list(_my_image_labels(app_env.store, cluster["id"], "many-classes").values()) == ["4"] * 10
    assert any("all 10 images" in s.value for s in at.success)
    at.button(key="label_all_10").click().run()  # none of the above (the N key), still a button
    assert set(_my_image_labels(app_env.store, cluster["id"], "many-classes").values()) == {"none"}


def test_label_page_preselects_nothing_remembers_the_name_and_moves_between_clusters(app_env, flawed_run):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["annotator"] = "returning-user"  # a reload keeps the name in the URL
    at.run()
    at.switch_page("pages/views/label.py").run()
    at.selectbox(key="label_run_pick").set_value(flawed_run["distill_run"]).run()
    assert at.text_input(key="annotator").value == "returning-user"
    at.button(key="label_next").click().run()  # → (the Right key in the browser)
    cluster = app_env.store.get_clusters(flawed_run["distill_run"])[1]
    images = app_env.store.get_review_images(cluster["id"])
    boxes = [at.selectbox(key=f"label_image_{image['id']}_returning-user_0") for image in images]
    assert [box.value for box in boxes] == [None] * 10  # nothing preselected: a careless click cannot invent a label
    assert not _my_image_labels(app_env.store, cluster["id"], "returning-user")
    boxes[0].select("8").run()
    assert _my_image_labels(app_env.store, cluster["id"], "returning-user") == {images[0]["id"]: "8"}
    at.button(key="label_prev").click().run()
    assert any(h.value.startswith("Cluster ") and "· 1 of" in h.value for h in at.subheader)


def test_finetune_page_sweeps_and_shows_before_after_baseline(app_env, flawed_run):
    source, _ = review.auto_label(app_env.registry, app_env.store, flawed_run["distill_run"], "default")
    at = open_page("pages/views/finetune.py")
    at.selectbox(key="finetune_run_pick").set_value(flawed_run["distill_run"]).run()
    at.selectbox(key="finetune_source").select(source).run()
    # digits are small images: the λ grid offered is the paper's, and the page says so before anything runs
    assert at.text_input(key="finetune_lambdas").value == ",".join(f"{lam:g}" for lam in PAPER_LAMBDAS)
    assert any(c.value.startswith("Defaults for this data: 17 λ") and "a full pass over D" in c.value
               for c in at.caption)
    at.text_input(key="finetune_lambdas").input("1")
    for key, name in (("finetune_epochs", "epochs"), ("finetune_per_region", "samples_per_region")):
        widget = at.number_input(key=key)
        assert (widget.min, widget.max) == steps.CorrectRequest.ranges[name], key
    at.number_input(key="finetune_epochs").set_value(1)
    at.number_input(key="finetune_per_region").set_value(32)
    submit = next(b for b in at.button if b.label == "Finetune")
    submit.click().run()
    assert not at.exception
    run = app_env.store.list_runs(kind=queries.CORRECT)[0]
    assert run.config["distill_run"] == flawed_run["distill_run"] and run.config["lambdas"] == [1.0]
    rerun_until(at, lambda a: any(s.value.startswith(f"Results (run {run.id},") for s in a.subheader))
    assert any("Swept: 1 λ (1), 1 epochs of a full pass over D" in c.value for c in at.caption)
    table = at.dataframe[-1].value
    assert list(table["classifier"]) == ["before", "Defuse", "baseline: labelled individual failures"]
    assert run.config["baseline"] == "labelled-images" and run.config["selection"] == "data"  # the paper's
    assert table["failure-region accuracy"].iloc[1] > table["failure-region accuracy"].iloc[0]
    # the trade-off at the chosen λ, and a warning past the test-accuracy drop the user allows
    assert any("At the chosen λ = 1:" in c.value for c in at.caption)
    drop = (table["test accuracy"].iloc[0] - table["test accuracy"].iloc[1]) * 100
    at.number_input(key="finetune_allowed_drop").set_value(max(0.0, round(drop, 1) - 0.5)).run()
    assert (drop > 0.5) == any("points of test accuracy" in w.value for w in at.warning)
    at.number_input(key="finetune_allowed_drop").set_value(100.0).run()
    assert not any("points of test accuracy" in w.value for w in at.warning)
    at.button(key="finetune_promote").click().run()
    corrected = app_env.store.get_run(run.id).result["corrected_model"]
    assert at.query_params["classifier"] == corrected  # kept in the URL: a reload keeps the choice
    # a reload (a new session from that URL) and a data-set switch and back keep the corrected classifier
    reloaded = AppTest.from_file(APP, default_timeout=120)
    reloaded.query_params["classifier"] = corrected
    reloaded.run()
    reloaded.switch_page("pages/views/probe.py").run()
    assert any(corrected in c.value for c in reloaded.caption), [c.value for c in reloaded.caption]
    reloaded.selectbox(key="dataset").set_value("scenes").run()
    reloaded.selectbox(key="dataset").set_value("digits").run()
    assert any(corrected in c.value for c in reloaded.caption), [c.value for c in reloaded.caption]
    # another λ of the sweep can be picked (or clicked on the chart) and finetuned alone
    assert at.selectbox(key="finetune_other_lambda").options[0].startswith("λ = 1: test ")
    at.button(key="finetune_other_start").click().run()
    again = app_env.store.list_runs(kind=queries.CORRECT)[0]
    assert again.id != run.id and again.config["lambdas"] == [1.0] and again.config["epochs"] == 1
    app_env.store.request_cancel(again.id)  # not needed further


def _forms(node):
    """The form blocks in an AppTest element tree."""
    if getattr(node, "type", None) == "form":
        yield node
    for child in getattr(node, "children", {}).values():
        yield from _forms(child)


def test_the_matrix_fields_sit_in_a_form_that_enter_does_not_submit_and_edits_start_no_run(app_env):
    """Enter in a field does not submit the form (``enter_to_submit=False``, read from the page's element tree;
    AppTest cannot press keys), every field is in that form, and editing fields starts no run: only the Build
    button does."""
    at = open_page("pages/views/matrix.py")
    [form] = [block for block in _forms(at._tree) if block.proto.form.form_id == "matrix-form"]
    assert form.proto.form.form_id == "matrix-form" and not form.proto.form.enter_to_submit
    fields = [box for box in at.number_input if box.key and box.key.startswith("matrix_")]
    assert len(fields) == 4 and all(box.proto.form_id == "matrix-form" for box in fields)
    before = len(app_env.store.list_runs(kind="sample"))
    for value in (3, 4, 5):
        at.number_input(key="matrix_chains:digits").set_value(value).run()
    assert not at.exception
    assert len(app_env.store.list_runs(kind="sample")) == before


def test_ambiguity_matrix_builds_in_the_background_and_opens_a_pair(app_env):
    at = open_page("pages/views/matrix.py")
    from probe_core.bayestrex import MATRIX_SAMPLER_DEFAULTS  # the page starts from the CLI's matrix defaults

    def field(name):
        return at.number_input(key=f"matrix_{name}:digits")

    assert [field(k).value for k in ("chains", "warmup", "samples", "keep")] == \
        [MATRIX_SAMPLER_DEFAULTS[k] for k in ("chains", "warmup", "samples", "keep_every")]
    field("chains").set_value(2)
    field("warmup").set_value(10)
    field("samples").set_value(10)
    field("keep").set_value(1)
    next(b for b in at.button if b.label.startswith("Build the")).click().run()
    assert not at.exception
    started = next(r for r in app_env.store.list_runs(kind="sample") if r.config.get("target") == "ambiguous-matrix")
    rerun_until(at, lambda a: app_env.store.get_run(started.id).status == "done"
                and any("pairs reached" in c.value for c in a.caption), timeout=240)
    run = app_env.store.get_run(started.id)
    assert len(run.result["targets"]) == 45
    at.selectbox(key="matrix_pair").set_value(1).run()
    assert not at.exception and any("samples are hits" in m.value for m in at.markdown)


def test_interpolation_samples_a_path_and_draws_the_strip(app_env):
    at = open_page("pages/views/interpolation.py")
    # the widgets' bounds and starting values are the path kind's and the request module's, not the page's
    assert (at.number_input(key="path_steps").min, at.number_input(key="path_steps").max) == PathKind.steps_range
    assert at.number_input(key="path_chains").value == PATH_PAGE_DEFAULTS["chains"]
    at.selectbox(key="path_from").select("1")
    at.selectbox(key="path_to").select("7")
    at.number_input(key="path_steps").set_value(3)
    at.number_input(key="path_chains").set_value(2)
    at.number_input(key="path_iterations").set_value(10)
    next(b for b in at.button if b.label == "Sample the path").click().run()
    rerun_until(at, lambda a: any("Best sample per step" in c.value for c in a.caption), timeout=180)
    assert len(at.image) >= 1
    # the run it drew is the path asked for: three steps from all-1 through half-and-half to all-7
    run = next(r for r in app_env.store.list_runs(kind="sample") if r.status == "done" and r.result
               and len(r.result["targets"]) == 3)
    assert [t["spec"] for t in run.result["targets"]] == ["probs:1=1", "probs:1=0.5,7=0.5", "probs:7=1"]


def test_compare_page_samples_two_classifiers_and_stores_a_label(app_env, flawed_run):
    at = open_page("pages/views/compare.py")
    at.number_input(key="compare_chains").set_value(2)
    at.number_input(key="compare_warmup").set_value(10)
    at.number_input(key="compare_samples").set_value(10)
    next(b for b in at.button if b.label == "Sample both").click().run()
    rerun_until(at, lambda a: any(s.value.startswith("Accuracy on") for s in a.subheader), timeout=240)
    at.text_input(key="annotator").input("comparer").run()
    label_box = next(s for s in at.selectbox if s.key and s.key.startswith("compare_label_"))
    sample_id = int(label_box.key.rsplit("_", 1)[1])
    label_box.select("0").run()
    assert not at.exception
    assert [label["label"] for label in app_env.store.get_labels(sample_id=sample_id)
            if label["annotator"] == "comparer"] == ["0"]
    # the labelled sample becomes a regression check of the classifier it was found on
    at.text_input(key="compare_suite").input("compare-page-suite").run()
    next(b for b in at.button if b.key and b.key.startswith("compare_add_checks_")).click().run()
    assert not at.error, [e.value for e in at.error]
    checks = app_env.store.get_suite_checks("compare-page-suite")
    assert len(checks) >= 1 and sample_id in [i for c in checks for i in c["evidence"]["sample_ids"]]


def test_saliency_page_explains_two_classes_side_by_side(app_env):
    at = open_page("pages/views/saliency.py")
    explained = next(box for box in at.selectbox if box.label == "Explain class").value
    at.selectbox(key="saliency_compare").select("8").run()
    assert not at.exception
    pictures = [image.proto.imgs[0] for image in at.image]
    # the image, then one heat map per class, each captioned with its class and its confidence
    assert [p.caption.split(" (p = ")[0] for p in pictures] == ["image", f"SmoothGrad for {explained}",
                                                                "SmoothGrad for 8"]
    assert explained != "8" and pictures[1].url != pictures[2].url  # two classes, two different maps
    at.selectbox(key="saliency_compare").select("(none)").run()
    assert not at.exception
    assert [image.proto.imgs[0].caption.split(" (p = ")[0] for image in at.image] == [
        "image", f"SmoothGrad for {explained}"]


def test_scene_world_probes_with_rwm_and_offers_object_removal(app_env):
    from helpers import register_scene_classifier

    register_scene_classifier(app_env)
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["dataset"] = "scenes"
    at.run()
    at.switch_page("pages/views/probe.py").run()
    assert not at.exception, at.exception
    assert any("random-walk Metropolis" in i.value for i in at.info)
    at.selectbox(key="probe_high").select("2 squares")
    at.number_input(key="probe_chains").set_value(8)
    at.number_input(key="probe_warmup").set_value(40)
    at.number_input(key="probe_samples").set_value(40)
    at.button(key="probe_start").click().run()
    assert not at.exception, at.exception
    run = app_env.store.list_runs(kind="sample")[0]
    assert run.config["dataset"] == "scenes" and run.config["target"] == "high:2 squares"  # in the class names
    rerun_until(at, lambda a: app_env.store.get_run(run.id).status == "done"
                and any("Summary" in s.value for s in a.subheader))
    assert app_env.store.get_run(run.id).result["sampler"] == "rwm"
    scenes_table = at.dataframe[-1].value
    assert "scene" in scenes_table.columns and scenes_table["scene"].str.contains(" at (", regex=False).any()

    at.switch_page("pages/views/saliency.py").run()
    at.radio(key="saliency_source").set_value("generated sample (Probe run)").run()
    at.session_state["saliency_run"] = run.id
    at.run()
    assert not at.exception, at.exception
    assert any("Object removal" in s.value for s in at.subheader)
    removal = at.dataframe[-1].value
    assert removal["decisive"].sum() == 1 and (removal["drop"].diff().dropna() <= 1e-9).all()


def test_saliency_explains_the_predicted_class_of_each_new_image(app_env):
    import torch

    from probe_core.catalog import load_dataset

    classifier = app_env.registry.resolve("default", "classifier", "digits").module
    test_images = load_dataset("digits").test_images
    at = open_page("pages/views/saliency.py")
    at.selectbox(key="saliency_class_test-0").select("1").run()  # the user explains another class of image 0
    for index in (5, 17):
        at.number_input(key="saliency_index").set_value(index).run()
        assert not at.exception
        with torch.no_grad():
            predicted = str(int(classifier(test_images[index:index + 1]).argmax()))
        assert at.selectbox(key=f"saliency_class_test-{index}").value == predicted


def test_pages_say_what_is_true_about_missing_models_and_running_builds(workspace, monkeypatch):
    """No claim that a model 'trains in the background' unless a training run is active; a build in
    progress is not called 'no matrix yet'."""
    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    at = open_page("pages/views/probe.py")
    assert any("not trained yet: train it on the **Models** page" in i.value for i in at.info), \
        [i.value for i in at.info]
    assert not any("in the background" in i.value for i in at.info)
    training = workspace.store.create_run("train", {"dataset": "digits", "models": "defaults"})
    workspace.store.start_run(training)  # owned by this (living) process: active
    at.run()
    assert any(f"is training now (run {training})" in i.value for i in at.info), [i.value for i in at.info]
    workspace.store.finish_run(training, "cancelled")


def test_the_cli_the_probe_page_and_the_api_store_the_same_request(app_env, capsys):
    """One request type for a sampling run, whoever starts it: the stored requests are equal, field by field."""
    import time

    import probe_core as mp
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.cli import main
    from probe_core.runs.runconfig import config_of

    store = app_env.store
    at = open_page("pages/views/probe.py")
    at.selectbox(key="probe_high").select("3")
    for key, value in (("probe_chains", 4), ("probe_warmup", 10), ("probe_samples", 10), ("probe_keep", 2),
                       ("probe_seed", 3)):
        at.number_input(key=key).set_value(value)
    at.button(key="probe_start").click().run()
    assert not at.exception
    page_run = store.list_runs(kind="sample")[0]
    deadline = time.time() + 120  # the tests' thread executor: Pyro's handler stack is one per process
    while store.get_run(page_run.id).status not in ("done", "failed", "cancelled") and time.time() < deadline:
        time.sleep(0.2)
    assert store.get_run(page_run.id).status == "done"
    assert main(["--workspace", str(app_env.root), "sample", "--target", "high:3", "--chains", "4", "--warmup", "10",
                 "--samples", "10", "--keep-every", "2", "--seed", "3"]) == 0
    cli_run = store.list_runs(kind="sample")[0]
    api_result = mp.sample("high:3", workspace=app_env.root, progress=False, chains=4, warmup=10, samples=10,
                           keep_every=2, seed=3)
    api_run = store.get_run(api_result.run_id)
    assert len({page_run.id, cli_run.id, api_run.id}) == 3
    assert page_run.config == cli_run.config == api_run.config
    request = config_of(api_run)
    assert isinstance(request, SampleRequest) and request == api_result.request
    assert request.classifier == app_env.registry.default_id("digits", "classifier")  # resolved, never "default"
    assert request.class_names == tuple(str(c) for c in range(10)) and request.shards == 1
    assert api_result.z.shape == (4 * 10 // 2, 8) and api_result.confidences.shape == (20, 10)
    assert len(api_result.to_pandas()) == 20 and "high:3" in api_result.summary()


def test_the_probe_page_offers_every_registered_target_kind(app_env, tmp_path):
    """A kind added in one module (the toy ``low:C``) is a choice on the page, parsed and described there."""
    from helpers import toy_target_kind

    with toy_target_kind(tmp_path):
        at = open_page("pages/views/probe.py")
        assert "Low confidence" in at.radio(key="probe_kind").options
        at.radio(key="probe_kind").set_value("Low confidence").run()
        at.text_input(key="probe_spec:low").set_value("low:3").run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert any("low confidence in 3" in c.value for c in at.caption)
        assert not at.button(key="probe_start").disabled


def test_failures_label_and_finetune_follow_one_distillation_run(app_env, flawed_run):
    """A run picked on the Label page is the one the Finetune page opens with (and the Failures page), so the
    labels given are the ones finetuned with; each page says which run it follows."""
    registry, store = app_env.registry, app_env.store
    older = flawed_run["distill_run"]
    newer, _ = steps.run_step(registry, store, steps.DistillRequest(identify_run=flawed_run["identify_run"],
                                                                     max_samples=500))
    at = open_page("pages/views/label.py")
    assert at.selectbox(key="label_run_pick").value == newer  # the newest, at first
    at.selectbox(key="label_run_pick").set_value(older).run()
    assert not at.exception and any(f"Following distillation run {older}" in c.value for c in at.caption)
    for page, key in (("pages/views/finetune.py", "finetune_run_pick"), ("pages/views/failures.py",
                                                                          "defuse_distill_pick")):
        at.switch_page(page).run()
        assert not at.exception, at.exception
        assert at.selectbox(key=key).value == older, page
        assert any(f"Following distillation run {older}" in c.value for c in at.caption)
    at.selectbox(key="defuse_distill_pick").set_value(newer).run()  # a pick on any page moves them all
    at.switch_page("pages/views/label.py").run()
    assert at.selectbox(key="label_run_pick").value == newer


def test_the_failures_form_shows_the_sizes_that_will_run_on_real_size_data(colours_workspace, monkeypatch):
    """On 32x32 colour data the form's fields hold what runs (the images and Q chosen from the data's size, the
    rule the CLI and the API use), and the run stores exactly those."""
    monkeypatch.setenv("PROBE_WORKSPACE", str(colours_workspace.root))
    monkeypatch.setenv("PROBE_DATASET", "colours")
    data = load_dataset("colours")
    planned, note = identify_step.sized_identification(steps.IdentifyRequest(dataset="colours"), data)
    # real size: every image, Q lowered to fit the budget
    assert note and planned.max_images == len(data.train_labels)
    assert planned.samples_per_image < steps.IdentifyRequest().samples_per_image
    at = open_page("pages/views/failures.py")
    assert at.number_input(key="defuse_images_colours").value == planned.max_images
    assert at.number_input(key="defuse_q").value == planned.samples_per_image
    assert any(f"{planned.max_images * planned.samples_per_image:,} decodings" in c.value for c in at.caption)
    at.number_input(key="defuse_images_colours").set_value(20)
    at.number_input(key="defuse_q").set_value(5)
    next(b for b in at.button if b.label == "Find failures").click().run()
    assert not at.exception
    [identify] = colours_workspace.store.list_runs(kind=queries.IDENTIFY)
    assert (identify.config["max_images"], identify.config["samples_per_image"]) == (20, 5)
    from probe_core.runs.jobs import JobManager

    JobManager(colours_workspace.store).cancel(identify.id)


def _one_cluster_copy(trained_workspace, flawed_run, tmp_path, monkeypatch, info: dict | None = None):
    """A copy of the workspace (the shared one's newest distillation run stays the flawed one) with a new
    distillation run of one cluster like the flawed run's first (its ``info`` updated with ``info``), opened by the
    pages; returns the copy's root, its store, the run's and the cluster's ids and the template cluster."""
    import shutil
    import sqlite3

    from probe_core.runs.workspace import DATABASE_NAME, Workspace

    root = tmp_path / "ws"
    shutil.copytree(trained_workspace.root, root, ignore=shutil.ignore_patterns(DATABASE_NAME + "*"))
    live, copy = sqlite3.connect(trained_workspace.root / DATABASE_NAME), sqlite3.connect(root / DATABASE_NAME)
    live.backup(copy)  # a consistent snapshot (copying a live database's files is not)
    live.close()
    copy.close()
    monkeypatch.setenv("PROBE_WORKSPACE", str(root))
    store = Workspace(root).store
    source = store.get_run(flawed_run["distill_run"])
    run_id = store.create_run(source.kind, source.config)
    store.finish_run(run_id, "done", result=source.result)
    template = store.get_clusters(flawed_run["distill_run"])[0]
    cluster = {key: template[key] for key in ("cluster_index", "weight", "size", "mean", "covariance", "info")}
    [cluster_id] = store.add_clusters(run_id, [{**cluster, "info": {**cluster["info"], **(info or {})}}])
    return root, store, run_id, cluster_id, template


def test_the_label_page_says_when_a_judge_recognised_no_class_in_a_regions_review_images(trained_workspace,
                                                                                         flawed_run, tmp_path,
                                                                                         monkeypatch):
    _, _, run_id, _, _ = _one_cluster_copy(trained_workspace, flawed_run, tmp_path, monkeypatch,
                                           {"recognisable": False, "recognised_by": "judge-x",
                                            "judge_agreeing": 3, "judged_images": 10})
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["annotator"] = "blur-checker"
    at.run()
    at.switch_page("pages/views/label.py").run()
    at.selectbox(key="label_run_pick").set_value(run_id).run()
    assert not at.exception
    [warning] = [w.value for w in at.warning if w.value.startswith("Not recognisable")]
    assert "judge-x" in warning and "3 of 10" in warning and "an oracle abstains here" in warning


def test_the_label_page_asks_about_a_picture_once_and_stores_the_label_for_every_copy(trained_workspace, flawed_run,
                                                                                      tmp_path, monkeypatch, capsys):
    """A cluster whose ten review images are three pictures (copies differing by a grey level or two) gets three
    questions; one answer labels each copy, and the answer is confirmed at once."""
    import numpy as np

    root, store, run_id, cluster_id, template = _one_cluster_copy(trained_workspace, flawed_run, tmp_path,
                                                                  monkeypatch)
    digits = load_dataset("digits")
    pictures = [0, 0, 0, 1, 1, 2, 2, 2, 2, 2]  # which of three training images each review image copies
    rng = np.random.default_rng(0)
    images = digits.train_images[:3].numpy()[pictures]
    images = np.clip(images + rng.integers(-2, 3, images.shape) / 255, 0, 1).astype(np.float32)  # invisible noise
    assert review.duplicate_groups(images) == [[0, 1, 2], [3, 4], [5, 6, 7, 8, 9]]
    ids = store.put_review_images(cluster_id, np.zeros((10, len(template["mean"])), np.float32), images,
                                  np.full(10, 8))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["annotator"] = "copy-checker"
    at.run()
    at.switch_page("pages/views/label.py").run()
    at.selectbox(key="label_run_pick").set_value(run_id).run()
    assert any("are 3 different pictures" in c.value for c in at.caption)
    boxes = [box for box in at.selectbox if box.key and box.key.startswith("label_image_")]
    assert [box.label for box in boxes] == ["Image 1, 2, 3 shows", "Image 4, 5 shows",
                                            "Image 6, 7, 8, 9, 10 shows"]
    boxes[1].select("3").run()
    assert _my_image_labels(store, cluster_id, "copy-checker") == {ids[3]: "3", ids[4]: "3"}
    saved = f"Saved: image 4, 5 of cluster {cluster_id} = 3"  # under the buttons, and as a toast
    assert [shown(s.value) for s in at.success] == [saved] and [shown(t.value) for t in at.toast] == [saved]
    # the CLI's preview says the same
    from probe_core.cli import main

    assert main(["--workspace", str(root), "defuse", "label", "--run", str(run_id), "--cluster", str(cluster_id),
                 "--preview", str(tmp_path / "preview.png")]) == 0
    printed = capsys.readouterr().out
    assert "images 1 2 3 are the same picture" in printed and "images 6 7 8 9 10 are the same picture" in printed
    assert "images 4 5 are the same picture: label them together (--image 4 --image 5 --label CLASS)" in printed
    assert main(["--workspace", str(root), "defuse", "label", "--run", str(run_id), "--cluster", str(cluster_id),
                 "--annotator", "copy-checker", "--image", "4", "--image", "5", "--label", "2"]) == 0
    assert _my_image_labels(store, cluster_id, "copy-checker") == {ids[3]: "2", ids[4]: "2"}


def test_the_models_page_offers_a_weak_generators_fix_with_its_time_and_the_button_trains_it(app_env):
    """A weak generator the tool trained: beside the table, its fix (the recipe trained twice as long) with the time
    it should take; the button trains exactly what the warning's command would, then names the new model."""
    from probe_core.models.remedies import longer_training

    registry = app_env.registry
    weak = registry.get_or_train(ModelSpec(dataset="digits", kind="vae", epochs=1, seed=7), reporter=SILENT)
    remedy = longer_training(weak.id, weak.record)
    fixed = remedy.spec.resolved(load_dataset("digits")).model_id()
    assert not registry.exists(fixed)
    at = open_page("pages/views/home.py")
    [button] = [b for b in at.button if b.key == f"fix-{weak.id}"]
    assert button.label == f"Train the fix ({remedy.time_words})" and "about" in remedy.time_words
    assert any("2x as long (2 epochs instead of 1" in c.value and remedy.command in c.value for c in at.caption)
    button.click().run()
    assert not at.exception and any("Training started" in s.value for s in at.success)
    rerun_until(at, lambda at: registry.exists(fixed) and any(f"is trained: `{fixed}`" in c.value for c in at.caption))
    assert registry.load(fixed).record["spec"]["epochs"] == 2
    assert not [b for b in at.button if b.key == f"fix-{weak.id}"]  # trained: no second button
