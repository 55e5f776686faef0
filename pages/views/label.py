"""Label: say what each review image of a failure cluster shows; every label is saved the moment it is given."""

import pandas as pd
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import (
    NONE_OF_THE_ABOVE,
    ONE_CLICK_CLASSES,
    REVIEW_IMAGES,
    agreement_summary,
    annotator_progress,
    auto_label,
    cluster_label_table,
    cluster_labels,
    duplicate_groups,
    label_images,
    labels_csv,
    nearest_misclassified_training,
    review_images,
    review_provenance,
    review_sources,
)
from probe_core import suites
from probe_core.defuse import queries
from probe_core.errors import ProbeError
from probe_core.reporting import figures
from probe_core.team.accounts import Permission

# an annotator names what a review image shows: at 64 pixels a 32x32 colour decoding's digit was hard to read
LABEL_IMAGE_HEIGHT = 160
ZOOM_IMAGE_HEIGHT = 384  # one review image and its source, nearest-neighbour scaled

ws = _ui.workspace()
st.title("Label")
st.markdown("Say what each of a cluster's **10 review images** shows, as the Defuse annotators did. Each image gets "
            "the majority label of its annotators; a cluster is a **failure region** when more than ρ = ½ of its "
            "images' labels differ from the classifier's prediction, and its label is the majority over its "
            "images. Labels are stored the moment you give them, per annotator.")

distill_run = _ui.pick_distill_run("label_run_pick")
if distill_run is None:
    st.info("Nothing to label yet: find failures on the **Failures** page first.")
    st.stop()
try:
    dataset, classifier, vae = queries.load_run_models(ws.registry, ws.store, distill_run.id, _ui.device())
except ProbeError as exc:
    st.error(f"Cannot load the models of run {distill_run.id}: {_ui.plain(exc)}")
    st.stop()
names = dataset.class_names
one_click = len(names) <= ONE_CLICK_CLASSES  # a button per class; more classes: a searchable list
st.markdown(("Keys: **0–9** label all ten images with that class, " if one_click else
             "Type a class's name in **All ten images show** to label all ten images with it; keys: ")
            + "**N** none of the above, **←/→** previous/next cluster; then change single images below.")
clusters = queries.clusters(ws.store, distill_run.id)
if not clusters:
    st.info("This run kept no clusters.")
    st.stop()

annotator = _ui.annotator_name()
if not annotator:
    st.info("Enter your name to start labelling; labels are stored per annotator.")


def labelled_by_me(cluster_id: int) -> dict[int, str]:
    """This annotator's labels of a cluster's review images: review image id -> label."""
    return queries.review_labels_by(ws.store, cluster_id, annotator)


complete = {cluster["id"] for cluster in clusters
            if len(labelled_by_me(cluster["id"])) >= REVIEW_IMAGES}
st.progress(len(complete) / len(clusters),
            text=f"{len(complete)} of {len(clusters)} clusters fully labelled by {annotator or '…'}")

st.session_state.setdefault("label_position", 0)
st.session_state.setdefault("label_version", 0)  # bumped when stored labels change, so the image boxes re-read them
if st.session_state["label_position"] >= len(clusters):
    st.session_state["label_position"] = 0


def move(step: int) -> None:
    st.session_state["label_position"] = (st.session_state["label_position"] + step) % len(clusters)


_ui.keys_to_page()  # the hotkeys keep working after a per-image dropdown was used
nav1, nav2, nav3, _ = st.columns([1, 1, 1, 3])
nav1.button("◀ Previous", key="label_prev", shortcut="Left", on_click=move, args=(-1,))
nav2.button("Next ▶", key="label_next", shortcut="Right", on_click=move, args=(1,))
if nav3.button("Next unlabelled", key="label_next_open"):
    open_ones = [index for index, c in enumerate(clusters) if c["id"] not in complete]
    if open_ones:
        st.session_state["label_position"] = open_ones[0]
cluster = clusters[st.session_state["label_position"]]

st.subheader(f"Cluster {cluster['cluster_index'] + 1} (id {cluster['id']}) · "
             f"{st.session_state['label_position'] + 1} of {len(clusters)}")
shown = review_images(ws.store, vae, classifier, cluster, queries.distill_tau(ws.store, distill_run.id))
predictions = [names[int(p)] for p in shown["predictions"]]
st.caption(f"{cluster['size']} failures in this cluster, weight {cluster['weight']:.3f}. Under each image: what the "
           f"classifier says, and your label.")
judged = cluster["info"]
if judged.get("recognisable") is False:
    st.warning(f"Not recognisable: the judge {judged['recognised_by']} calls no one class in most of these review "
               f"images ({judged['judge_agreeing']} of {judged['judged_images']} surely one class). They are likely "
               "blurs the generator made, not the classifier's failures: label what you see, or 'none of the "
               "above'; an oracle abstains here, and a fix of this region fixes nothing a person could see.")
mine = labelled_by_me(cluster["id"])
choices = list(names) + ["none of the above"]


def stored_label(choice: str) -> str:
    return NONE_OF_THE_ABOVE if choice == "none of the above" else choice


def label_all(choice: str) -> None:
    try:
        label_images(ws.store, shown["ids"], annotator, stored_label(choice), names,
                     actor=_ui.current_actor())
        st.session_state["label_version"] += 1
        st.session_state["label_saved"] = f"Saved: all {len(shown['ids'])} images of cluster {cluster['id']} = {choice}"
    except ProbeError as exc:
        st.session_state["label_problem"] = str(exc)


def label_one(image_ids: list[int], numbers: str, widget_key: str) -> None:
    """Label one picture: the review images ``image_ids`` (one, or copies a person cannot tell apart)."""
    choice = st.session_state[widget_key]
    if choice is None:
        return
    try:
        label_images(ws.store, image_ids, annotator, stored_label(choice), names,
                     actor=_ui.current_actor())
        st.session_state["label_saved"] = f"Saved: image {numbers} of cluster {cluster['id']} = {choice}"
    except ProbeError as exc:
        st.session_state["label_problem"] = str(exc)


version = st.session_state["label_version"]


def label_all_picked(widget_key: str) -> None:
    if st.session_state[widget_key] is not None:
        label_all(st.session_state[widget_key])


if one_click:
    st.markdown("**All ten images show:**")
    with st.container(horizontal=True):
        for index, choice in enumerate(choices):
            st.button(choice, key=f"label_all_{index}", disabled=not annotator,
                      shortcut="N" if choice == "none of the above" else str(index),
                      on_click=label_all, args=(choice,))
else:
    with st.container(horizontal=True, vertical_alignment="bottom"):
        pick_key = f"label_all_pick_{cluster['id']}_{annotator}_{version}"
        st.selectbox("All ten images show", choices, key=pick_key, index=None, placeholder="type a class…",
                     disabled=not annotator, on_change=label_all_picked, args=(pick_key,), width=360)
        st.button("none of the above", key=f"label_all_{len(names)}", disabled=not annotator, shortcut="N",
                  on_click=label_all, args=("none of the above",))
# every key press and choice answers at once, here under the buttons and as a toast, wherever the page is scrolled
if "label_problem" in st.session_state:
    st.error(_ui.plain(st.session_state.pop("label_problem")))
if "label_saved" in st.session_state:
    saved = _ui.plain(st.session_state.pop("label_saved"))  # the label may be typed text
    st.success(saved)
    st.toast(saved)
placed_review = review_provenance(dataset, shown["images"])
copies = int(placed_review["provenance"].near_copy.sum())
if copies:
    st.caption(f"{copies} of these {len(shown['ids'])} review images are near copies of a training image (nearer it "
               "than half a real test image's median distance to its nearest training image): what they show is in "
               "the data already. 'Look closer' shows each beside its nearest training image.")
pictures = duplicate_groups(shown["images"])
if len(pictures) < len(shown["ids"]):
    st.caption(f"These {len(shown['ids'])} review images are {len(pictures)} different pictures: a picture that "
               "appears more than once is asked about once, and your label is stored for each copy.")
for row_start in range(0, len(pictures), 5):
    for column, copies in zip(st.columns(5), pictures[row_start:row_start + 5]):
        position, image_id = copies[0], shown["ids"][copies[0]]
        numbers = ", ".join(str(copy + 1) for copy in copies)
        with column:
            _ui.show_picture(shown["images"][position:position + 1], columns=1, height=LABEL_IMAGE_HEIGHT,
                             caption=f"{numbers}: classifier says {predictions[position]}"
                             + (f" ({len(copies)} copies)" if len(copies) > 1 else ""))
            current = mine.get(image_id)
            current_choice = "none of the above" if current == NONE_OF_THE_ABOVE else current
            widget_key = f"label_image_{image_id}_{annotator}_{version}"
            st.selectbox(f"Image {numbers} shows", choices, key=widget_key, disabled=not annotator,
                         index=choices.index(current_choice) if current_choice in choices else None,
                         placeholder="class…", on_change=label_one,
                         args=([shown["ids"][copy] for copy in copies], numbers, widget_key))
with st.expander("Look closer: an image at full size, beside the training image it came from"):
    closer = st.selectbox("Image", range(1, len(shown["ids"]) + 1), key=f"label_closer_{cluster['id']}",
                          format_func=lambda number: f"image {number} (classifier says {predictions[number - 1]})")
    sources = None
    if st.toggle("Beside the training images they came from", key="label_sources",
                 help="Review images are drawn from the cluster's region of the generator's codes; each is shown "
                      "with the training image whose perturbation (one of the cluster's failures) lies nearest "
                      "it, and that image's label: what the classifier got right beside what it gets wrong."):
        try:  # reads the run's failures (once per server): only when asked
            sources = review_sources(ws.registry, ws.store, distill_run.id, cluster, _ui.device(),
                                     models=(dataset, classifier, vae),
                                     failures=_ui.failures_of_run(distill_run.id))
        except ProbeError as exc:
            st.error(_ui.plain(exc))
    review_column, source_column, nearest_column = st.columns(3)
    with review_column:
        _ui.show_picture(shown["images"][closer - 1:closer], columns=1, height=ZOOM_IMAGE_HEIGHT,
                         caption=f"review image {closer}: classifier says {predictions[closer - 1]}")
    with nearest_column:
        place = placed_review["provenance"]
        _ui.show_picture(placed_review["images"][closer - 1:closer], columns=1, height=ZOOM_IMAGE_HEIGHT,
                         caption=f"its nearest training image ({place.nearest[closer - 1]}, labelled "
                                 f"{dataset.class_names[int(dataset.train_labels[place.nearest[closer - 1]])]}): "
                                 f"distance {place.ratio[closer - 1]:.2f}× a test image's"
                                 + (", a near copy" if place.near_copy[closer - 1] else ""))
    if sources is not None:
        with source_column:
            _ui.show_picture(sources["images"][closer - 1:closer], columns=1, height=ZOOM_IMAGE_HEIGHT,
                             caption=f"training image {sources['index'][closer - 1]}, labelled "
                                     f"{names[int(sources['label'][closer - 1])]}")
        st.caption("All ten: the review images (top) over the training images they came from (bottom).")
        _ui.show_picture(torch.cat([shown["images"], sources["images"]]), columns=len(shown["ids"]))
mine = labelled_by_me(cluster["id"])
verdict = cluster_labels(ws.store, cluster, names)
st.caption(f"You labelled {len(mine)} of {len(shown['ids'])} images. All annotators so far: "
           + ("no image has a class majority yet." if verdict["is_failure"] is None else
              f"{verdict['images_disagreeing']} of {verdict['images_decided']} images differ from the classifier → "
              f"{'a failure region' if verdict['is_failure'] else 'not a failure region'}"
              + (f", label {verdict['label']}." if verdict["label"] else ".")))

if verdict["is_failure"] and verdict["label"]:
    with st.expander("Keep this failure region as a regression check"):
        st.caption(f"A check holds {suites.REGION_SAMPLES} held-out samples of this region, labelled "
                   f"{verdict['label']}; every new classifier version can be scored on it (Regressions page).")
        suite_name = _ui.suite_choice(dataset.name, "label_suite")
        if st.button("Add to the suite", key=f"label_add_check_{cluster['id']}", disabled=not suite_name):
            try:
                _ui.require(Permission.SUITES)
                check_id = suites.add_region_check(ws.registry, ws.store, suite_name, distill_run.id, cluster["id"],
                                                   device=_ui.device())
            except ProbeError as exc:
                st.error(_ui.plain(exc))
            else:
                st.success(f"Check {check_id} added to {suite_name}.")

with st.expander("Is this failure new? The nearest misclassified training images (paper Fig. 6)"):
    novelty = None
    if st.toggle("Compare with the training images the classifier gets wrong", key="label_novelty"):
        try:
            novelty = nearest_misclassified_training(ws.registry, ws.store, distill_run.id, cluster,
                                                     _ui.device(), models=(dataset, classifier, vae))
        except ProbeError as exc:
            st.error(_ui.plain(exc))
    if novelty is not None and not novelty["misclassified_training_images"]:
        st.info("The classifier gets every training image right: every failure here is new.")
    elif novelty is not None:
        st.caption(f"Top: the review images. Bottom: for each, the nearest (ℓ2, pixels) of the "
                   f"{novelty['misclassified_training_images']} training images the classifier gets wrong. "
                   "Similar pairs mean the failure was already in the data; different ones mean it is new.")
        _ui.show_picture(novelty["review_images"], columns=len(novelty["review_images"]))
        _ui.show_picture(torch.as_tensor(novelty["images"]), columns=len(novelty["images"]))
        st.dataframe(pd.DataFrame({
            "review image": range(1, len(novelty["index"]) + 1), "training index": novelty["index"],
            "its label": [names[c] for c in novelty["label"]],
            "classifier says": [names[c] for c in novelty["prediction"]],
            "ℓ2 distance": novelty["distance"].round(2),
            "ℓ2 to nearest training image": novelty["nearest_any_distance"].round(2)}), hide_index=True)

st.subheader("All annotators")
progress = annotator_progress(ws.store, distill_run.id)
if progress:
    st.dataframe(pd.DataFrame([{
        "annotator": r["annotator"], "images labelled": r["images_labelled"],
        "clusters complete": f"{r['clusters_complete']}/{len(clusters)}", "relabels": r["relabels"],
        "last label": pd.Timestamp(r["last_labelled_at"], unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M UTC")}
        for r in progress]), hide_index=True, key="label_annotator_progress")
table = cluster_label_table(ws.store, distill_run.id, names)
this_cluster = next(r for r in table if r["id"] == cluster["id"])
if this_cluster["agreement"] is not None:
    spread = "" if this_cluster["agreement_se"] is None else f" ± {this_cluster['agreement_se'] * 100:.0f}"
    st.markdown(f"Cluster {cluster['id']}: agreement **{this_cluster['agreement'] * 100:.0f}{spread} %** over "
                f"**{this_cluster['annotators']} annotators** (one vote per annotator and image)")
frame = pd.DataFrame([{
    "cluster": r["id"], "classifier says": names[r["majority_prediction"]], "annotators": r["annotators"],
    "images labelled": r["images_labelled"],
    "differ from classifier": f"{r['images_disagreeing']}/{r['images_decided']}" if r["labelled_per"] == "image"
    else ("whole-cluster labels" if r["labelled_per"] else ""),
    "failure region": r["is_failure"],
    "label": r["label"] if r["is_failure"] else ("not a failure" if r["is_failure"] is False else ""),
    "agreement": r["agreement"]} for r in table])
st.dataframe(frame, hide_index=True, column_config={
    "agreement": st.column_config.ProgressColumn("agreement", min_value=0.0, max_value=1.0, format="percent",
                                                 help="per image, the share of annotators voting for its majority "
                                                      "label; the cluster's mean")})
agreement = agreement_summary(table)
figure = figures.agreement_figure(agreement)
if figure is not None:
    st.plotly_chart(figure, key="label_agreement")

st.subheader("Export")
e1, e2, e3 = st.columns(3)
text, rows = labels_csv(ws.store, distill_run.id, actor=_ui.current_actor())
e1.download_button(f"Labels (CSV, {rows} rows)", text, f"labels-run{distill_run.id}.csv", mime="text/csv",
                   key="label_csv")


def labelled_failures_npz() -> bytes:
    """Built only when the button is clicked: it reads every failure of the run."""
    return queries.labelled_failures_npz(ws.store, distill_run.id, names, actor=_ui.current_actor())[0]


in_failure_regions = sum(r["size"] for r in table if r["usable"])  # the failures assigned to those clusters
e2.download_button(f"Labelled failures (.npz, {in_failure_regions})", labelled_failures_npz,
                   f"labelled-failures-run{distill_run.id}.npz", key="label_npz")
with e3.popover("Auto-label (demo)"):
    st.caption("For demos only: an oracle classifier labels every cluster. Stored as 'oracle:MODEL', never mixed "
               "with human labels; pick its labels on the Finetune page.")
    oracle = st.text_input("Oracle model id or plugin", "default", key="label_oracle")
    if st.button("Auto-label all clusters", key="label_auto"):
        try:
            _ui.require(Permission.RUN)  # an oracle is a model the server loads and runs (the registry decides which)
            source, written = auto_label(ws.registry, ws.store, distill_run.id, oracle, device=_ui.device())
            st.success(f"{len(written)} clusters labelled as {source}")
        except ProbeError as exc:
            st.error(_ui.plain(exc))
