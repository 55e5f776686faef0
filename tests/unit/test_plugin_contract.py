"""The plugin contract checked on small plugin files: what passes and the errors for what does not."""

import pytest
import torch
from helpers import write_plugin

from probe_core.errors import PluginError
from probe_core.models import load_plugin


def test_valid_probability_classifier_and_generator(tmp_path):
    path = write_plugin(tmp_path, """
        class Gen(nn.Module):
            latent_dim = 3
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 64)
            def decode(self, z):
                return torch.sigmoid(self.fc(z)).view(-1, 1, 8, 8)
        def classifier():
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.Softmax(dim=1))
        def generator():
            return Gen()
    """)
    plugin = load_plugin(path)
    assert plugin.image_shape == (1, 8, 8) and len(plugin.class_names) == 10
    probs = plugin.classifier(plugin.generator.decode(torch.randn(4, 3)))
    assert probs.shape == (4, 10) and torch.allclose(probs.sum(1), torch.ones(4), atol=1e-5)


def test_logits_without_saying_so_get_a_hint(tmp_path):
    path = write_plugin(tmp_path, """
        def classifier():
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    """)
    with pytest.raises(PluginError, match='classifier_outputs = "logits"'):
        load_plugin(path)
    declared = write_plugin(tmp_path, """
        classifier_outputs = "logits"
        def classifier():
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    """, name="declared.py")
    probs = load_plugin(declared).classifier(torch.rand(2, 1, 8, 8))
    assert torch.allclose(probs.sum(1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize(
    "body, message",
    [
        ("import not_a_real_module_xyz\ndef classifier(): pass\n", "failed to import: ModuleNotFoundError"),
        ("def classifier():\n    raise RuntimeError('weights missing')\n", "classifier\\(\\) raised RuntimeError: weights missing"),
        ("def classifier():\n    return 3\n", "must return a torch.nn.Module"),
        ("def classifier():\n    return nn.Sequential(nn.Flatten(), nn.Linear(64, 7), nn.Softmax(1))\n",
         "returns 7 classes but class_names has 10"),
        ("class N(nn.Module):\n    def forward(self, x):\n        return torch.full((len(x), 10), float('nan'))\n"
         "def classifier():\n    return N()\n", "NaN"),
        ("def classifier():\n    return nn.Flatten()\n", "\\(B, K\\)|not probabilities|classes"),
        ("x = 1\n", "neither classifier\\(\\) nor generator\\(\\)"),
        ("class G(nn.Module):\n    latent_dim = 2\n    def decode(self, z):\n        return torch.ones(len(z), 1, 8, 8) * 3\n"
         "def generator():\n    return G()\n", "pixels in \\[0, 1\\]"),
        ("class G(nn.Module):\n    def decode(self, z):\n        return z\ndef generator():\n    return G()\n", "latent_dim"),
    ],
)
def test_bad_plugins_give_clear_errors(tmp_path, body, message):
    with pytest.raises(PluginError, match=message):
        load_plugin(write_plugin(tmp_path, body))


def test_missing_file_and_missing_class_names(tmp_path):
    with pytest.raises(PluginError, match="not found"):
        load_plugin(tmp_path / "absent.py")
    path = tmp_path / "nameless.py"
    path.write_text("from torch import nn\ndef classifier():\n    return nn.Sequential(nn.Flatten(), nn.Softmax(1))\n")
    with pytest.raises(PluginError, match="no class_names"):
        load_plugin(path, image_shape=(1, 2, 2))
