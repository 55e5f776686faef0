"""Defuse parts without trained models: perturbation noise, the clusterer, label aggregation."""

from __future__ import annotations

import numpy as np
import pytest

from probe_core.defuse import labels as label_tools
from probe_core.defuse.cluster import FailureClusterer
from probe_core.defuse.identify import perturbation_noise
from probe_core.errors import ProbeError


def test_noise_modes_have_the_documented_moments():
    rng = np.random.default_rng(0)
    paper = perturbation_noise((20000, 8), "paper", 50, 50, 0.15, rng)
    centered = perturbation_noise((20000, 8), "centered", 50, 50, 0.15, rng)
    assert abs(paper.mean() - 0.5) < 0.002 and abs(paper.std() - 0.0498) < 0.002
    assert abs(centered.mean()) < 0.003 and abs(centered.std() - 0.15) < 0.003
    with pytest.raises(ProbeError, match="noise mode"):
        perturbation_noise((2, 2), "gaussian", 50, 50, 0.15, rng)
    with pytest.raises(ProbeError, match="a > 0"):
        perturbation_noise((2, 2), "paper", 0, 50, 0.15, rng)


def test_failure_clusterer_follows_sklearn_conventions_and_finds_planted_clusters():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(0)
    centres = np.array([[0.0] * 4, [6.0] * 4, [-6.0, 6.0, -6.0, 6.0]])
    truth = np.repeat([0, 1, 2], [600, 300, 100])
    latents = centres[truth] + rng.normal(scale=0.5, size=(1000, 4))
    clusterer = FailureClusterer(n_components=20, max_samples=800, random_state=0)
    assert (clusterer.n_components, clusterer.max_samples) == (20, 800)  # arguments stored as given
    with pytest.raises(ProbeError, match="not fitted"):
        clusterer.predict(latents)
    assert clusterer.fit(latents) is clusterer
    assert clusterer.n_clusters_ == 3
    assert clusterer.weights_ == pytest.approx([0.6, 0.3, 0.1], abs=0.03)
    assert clusterer.means_.shape == (3, 4) and clusterer.covariances_.shape == (3, 4, 4)
    assert adjusted_rand_score(truth, clusterer.labels_) > 0.95
    assert (clusterer.predict(centres) == clusterer.predict(centres[[0, 1, 2]])).all()
    with pytest.raises(ProbeError, match="NaN"):
        FailureClusterer().fit(np.full((10, 2), np.nan))




def test_aggregate_handles_ties_and_none_of_the_above():
    def entry(who, failure, label):
        return {"annotator": who, "is_failure": failure, "label": label}

    tie = label_tools.aggregate([entry("a", True, "3"), entry("b", True, "5")])
    assert tie["is_failure"] is True and tie["label"] is None and tie["agreement"] == 0.5 and not tie["usable"]
    nothing = label_tools.aggregate([entry("a", True, "none"), entry("b", True, "none"), entry("c", True, "3")])
    assert nothing["label"] == "none" and not nothing["usable"]
    half = label_tools.aggregate([entry("a", True, "3"), entry("b", False, "3")])
    assert half["is_failure"] is False  # exactly ρ = 0.5 is not more than half
    assert label_tools.aggregate([])["is_failure"] is None
    with pytest.raises(ProbeError, match="unknown class"):
        label_tools.normalise_label("eleven", tuple("0123456789"))
