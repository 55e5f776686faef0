"""The shipped weights (the scene classifier, the default digits and colours models) still match the code that
made them, and the files are the ones recorded."""

import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))

import make_default_models  # noqa: E402
import make_scene_classifier  # noqa: E402


def test_shipped_weights_match_their_recipe_and_their_recorded_sha256():
    recorded = json.loads(make_scene_classifier.FINGERPRINT.read_text())
    assert make_scene_classifier.weights_sha256() == recorded["weights_sha256"], (
        "tests/data/scenes-classifier.pt is not the file recorded beside it: rerun tests/data/make_scene_classifier.py")
    current = make_scene_classifier.recipe_fingerprint()
    stale = [part for part in current if current[part] != recorded["recipe"].get(part)]
    assert not stale, (f"the shipped scene classifier was trained with another {', '.join(stale)}: retrain it with "
                       f"python tests/data/make_scene_classifier.py (about 4 minutes)")


@pytest.mark.parametrize("name", make_default_models.SHIPPED_SETS)
def test_shipped_default_models_match_their_recipe(name):
    stale = make_default_models.stale_parts(name)
    assert not stale, (f"the models in tests/data/{name}-defaults were made with another {', '.join(stale)}: "
                       f"retrain them with python tests/data/make_default_models.py {name} (about a minute); "
                       f"until then the tests train them")
