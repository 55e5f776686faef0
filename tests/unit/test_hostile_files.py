"""Hostile files are refused with the project's error and a clear message, never a raw traceback, and never run."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from probe_core.cli import main
from probe_core.data.files import load_arrays
from probe_core.errors import DataError, ProbeError
from probe_core.runs.workspace import Workspace


class _Payload:
    """Unpickling this creates a file: the proof that pickled code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_an_npz_with_object_arrays_is_refused_with_a_data_error(tmp_path, capsys):
    path = tmp_path / "objects.npz"
    np.savez(path, x=np.array([_Payload(tmp_path / "ran")], dtype=object), y=np.array([0]))
    with pytest.raises(DataError, match="holds Python objects, which are never unpickled"):
        load_arrays(path)
    assert not (tmp_path / "ran").exists()
    assert main(["--workspace", str(tmp_path / "ws"), "data", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "never unpickled" in err


def test_a_stored_model_whose_weights_are_a_pickle_payload_is_refused_and_not_run(tmp_path):
    workspace = Workspace(tmp_path / "ws")
    weights = workspace.registry.models_dir / "evil.pt"
    weights.write_bytes(pickle.dumps({"layer.weight": _Payload(tmp_path / "ran")}))
    workspace.store.put_model("evil", "classifier", "digits", str(weights),
                              {"architecture": {"class": "SmallCNN", "args": {}}, "class_names": list("0123456789")},
                              {})
    with pytest.raises(ProbeError, match="cannot be loaded as plain tensors .*never pickled code"):
        workspace.registry.load("evil")
    assert not (tmp_path / "ran").exists()


def test_an_unknown_model_id_names_no_server_path(tmp_path):
    workspace = Workspace(tmp_path / "ws")
    with pytest.raises(ProbeError) as refused:
        workspace.registry.load("no-such-model")
    assert str(tmp_path) not in str(refused.value) and "models" + "/" not in str(refused.value)
