import textwrap

import pytest

from probe_core.errors import PluginError

HEADER = """
import torch
from torch import nn
class_names = [str(i) for i in range(10)]
input_shape = (1, 8, 8)
"""


def write_plugin(tmp_path, body, name="plugin.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path










def test_registry_resolves_plugins(trained_workspace, tmp_path):
    path = write_plugin(tmp_path, """
        classifier_outputs = "logits"
        def classifier():
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    """)
    loaded = trained_workspace.registry.resolve(str(path), "classifier")
    assert loaded.kind == "plugin-classifier" and loaded.class_names[3] == "3"
    with pytest.raises(PluginError, match="no generator"):
        trained_workspace.registry.resolve(str(path), "generator")
