"""Plugins resolved through the registry of a workspace with trained models."""

import pytest
from helpers import write_plugin

from probe_core.errors import PluginError


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
