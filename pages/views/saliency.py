"""Saliency: SmoothGrad heat maps on a data-set image or a generated sample, for one class or two side by side."""

import numpy as np
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import SceneGenerator, overlay, smoothgrad
from probe_core.bayestrex import queries as sample_queries
from probe_core.errors import ProbeError
from probe_core.reporting import figures

ws = _ui.workspace()
st.title("Saliency")
st.markdown("Which pixels drive the classifier's confidence? **SmoothGrad** (Captum `NoiseTunnel(Saliency)`): the "
            "gradient of a class probability, averaged over noisy copies of the image.")

dataset, classifier, _, names = _ui.page_models(need_generator=False)

source = st.radio("Image", ["test image", "generated sample (Probe run)"], horizontal=True, key="saliency_source")
image = None
scene = None  # the scene vector behind the image, when it comes from the scene world
if source == "test image":
    index = st.number_input("Test image index", 0, len(dataset.test_labels) - 1, 0, key="saliency_index")
    image = dataset.test_images[int(index)]
    image_key = f"test-{int(index)}"
    st.caption(f"True class: {names[int(dataset.test_labels[int(index)])]}")
else:
    run = _ui.pick_run("sample", "Probe run", "saliency_run", dataset=dataset.name,
                       describe=lambda r: f"run {r.id} · {r.config.get('target', r.config.get('recipe', '?'))}")
    stored = sample_queries.samples(ws.store, run.id, limit=500) if run is not None else []
    if not stored:
        st.info("No stored samples yet: run a target on the Probe page.")
        st.stop()
    hits = [s for s in stored if s["hit"]] or stored
    pick = st.slider("Sample", 0, len(hits) - 1, 0, key=f"saliency_sample_{run.id}") if len(hits) > 1 else 0
    image = torch.tensor(hits[pick]["image"])
    image_key = f"sample-{hits[pick]['id']}"
    made_with = run.config.get("classifier")
    if made_with not in (None, "default", classifier.id):
        st.warning(f"This sample comes from run {run.id}, made with the classifier `{made_with}`; the heat maps "
                   f"below explain this session's classifier `{classifier.id}` (change it on the Models page).")
    try:
        run_generator = _ui.load_model(run.config.get("generator") or "default", "generator", dataset.name)
    except ProbeError:
        run_generator = None  # its generator is gone: the sample's image is still shown and explained
    if run_generator is not None and isinstance(run_generator.module, SceneGenerator):
        scene = torch.as_tensor(hits[pick]["z"])
    st.caption(f"Sample {hits[pick]['id']} (chain {hits[pick]['chain']}, step {hits[pick]['step']})"
               + (", a hit" if hits[pick]["hit"] else ""))

with torch.no_grad():
    probs = classifier.module(image[None].to(_ui.device())).cpu()[0]
predicted = int(probs.argmax())
c1, c2, c3, c4 = st.columns(4)
# keyed by the image, so a new image starts at the class the classifier predicts for it
first = c1.selectbox("Explain class", names, index=predicted, key=f"saliency_class_{image_key}")
second = c2.selectbox("Compare with class", ["(none)"] + list(names), key="saliency_compare")
noise = c3.slider("Noise level (sd, fraction of the pixel range)", 0.0, 0.5, 0.15, 0.01, key="saliency_noise")
samples = c4.slider("Noisy samples", 1, 200, 50, key="saliency_samples")

classes = [names.index(first)] + ([names.index(second)] if second != "(none)" else [])
try:
    maps = smoothgrad(classifier.module, image[None].repeat(len(classes), 1, 1, 1).to(_ui.device()),
                      torch.tensor(classes, device=_ui.device()), noise_level=noise, samples=samples)
except ProbeError as exc:
    st.error(_ui.plain(exc))
    st.stop()
scale = _ui.upscale_for_display(image.shape[-2]) * 3
columns = st.columns(len(classes) + 2)
columns[0].image(_ui.image_grid(image[None], columns=1, scale=scale), caption="image")
for column, cls, heat in zip(columns[1:], classes, maps.cpu()):
    picture = np.kron(overlay(image.cpu(), heat), np.ones((scale, scale, 1), dtype=np.uint8))
    column.image(picture, caption=f"SmoothGrad for {names[cls]} (p = {float(probs[cls]):.2f})")
columns[-1].plotly_chart(figures.confidence_bars(probs, names, "confidences", height=220), key="saliency_bars")

if scene is not None:
    from probe_core.api.ui import object_removal, removal_table
    from probe_core.api.ui import SLOT

    st.subheader("Object removal (counterfactual)")
    st.markdown("Remove each object in turn, re-render the scene, and see how much the confidence in "
                f"**{first}** drops; the object it rests on most is marked.")
    try:
        removal = object_removal(classifier.module, scene, scene.numel() // SLOT, names.index(first), image.shape[-1])
    except ProbeError as exc:
        st.error(_ui.plain(exc))
        st.stop()
    if not removal["objects"]:
        st.info("This scene is empty: there is no object to remove.")
        st.stop()
    rows = removal_table(removal)
    cells = st.columns(min(len(rows) + 1, 6))
    cells[0].image(_ui.image_grid(removal["image"][None], columns=1, scale=scale),
                   caption=f"scene: p({first}) = {removal['confidence']:.2f}")
    for cell, row, full in zip(cells[1:], rows, removal["objects"]):
        mark = " ← decisive" if row["decisive"] else ""
        cell.image(_ui.image_grid(full["image_without"][None], columns=1, scale=scale),
                   caption=f"without the {row['object']}: {row['confidence_without']:.2f} "
                           f"(drop {row['drop']:+.2f}){mark}")
    st.dataframe(rows, hide_index=True)
