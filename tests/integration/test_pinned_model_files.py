"""A plugin or model file recorded in a run is pinned as data references are (issue 102).

An admin's use pins what the reference resolves to (its real path; a plugin's sha256 with the .py files of its
folder, a model file's with its sidecar); an annotator's resolution compares the pin before anything is imported,
and refuses a reference re-pointed, edited or never pinned, until an admin uses it again.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import write_tiny_plugin

from probe_core.team.accounts import Actor, PermissionDenied

ANNOTATOR = Actor("ann", "annotator", signed_in=True)
MARKER = """
from pathlib import Path as _Path
(_Path(__file__).resolve().parent.parent / "{name}.imported").write_text("imported")
"""  # written outside the plugin's folder: a new file beside a plugin changes its pin
REFUSED = "as they were when used"


def _plugin(folder, name):
    folder.mkdir(parents=True, exist_ok=True)
    return write_tiny_plugin(folder, f"{name}.py", extra=MARKER.format(name=name))


def _recorded(workspace, reference):
    """An admin's run names the reference (what makes it known to annotators), and the admin uses it."""
    workspace.store.create_run("sample", {"dataset": "digits", "classifier": reference}, user="local:admin")
    workspace.registry.resolve(reference, "classifier", "digits")


def test_a_re_pointed_or_edited_plugin_is_refused_and_imports_nothing_until_an_admin_uses_it_again(workspace,
                                                                                                    tmp_path):
    reviewed, other = _plugin(tmp_path / "reviewed", "reviewed"), _plugin(tmp_path / "other", "other")
    link = tmp_path / "plugins" / "linked.py"
    link.parent.mkdir()
    link.symlink_to(reviewed)
    reference = str(link)
    _recorded(workspace, reference)
    annotator = workspace.registry.acting_as(ANNOTATOR)
    assert annotator.resolve(reference, "classifier", "digits").class_names  # pinned: allowed
    link.unlink()
    link.symlink_to(other)  # re-pointed at a file nobody reviewed
    with pytest.raises(PermissionDenied, match=REFUSED) as refused:
        annotator.resolve(reference, "classifier", "digits")
    assert str(tmp_path) not in str(refused.value)
    assert not (tmp_path / "other.imported").exists()  # the new plugin's code never ran
    events = workspace.store.account_events(kinds=("reference-refused",))
    assert events and events[0]["name"] == "ann" and reference in events[0]["detail"]
    link.unlink()
    link.symlink_to(reviewed)
    annotator.resolve(reference, "classifier", "digits")  # the reviewed file again is what was allowed
    # edited in place, and separately a helper beside it that it could import
    (tmp_path / "reviewed.imported").unlink()
    reviewed.write_text(reviewed.read_text() + "\n# edited\n")
    with pytest.raises(PermissionDenied, match=REFUSED):
        annotator.resolve(reference, "classifier", "digits")
    assert not (tmp_path / "reviewed.imported").exists()
    workspace.registry.resolve(reference, "classifier", "digits")  # the admin uses it again: pinned anew
    annotator.resolve(reference, "classifier", "digits")
    (tmp_path / "reviewed" / "helper.py").write_text("VALUE = 1\n")
    with pytest.raises(PermissionDenied, match=REFUSED):
        annotator.resolve(reference, "classifier", "digits")


def test_a_plugin_recorded_before_pins_existed_is_refused_for_annotators(workspace, tmp_path):
    plugin = _plugin(tmp_path / "old", "old")
    workspace.store.create_run("sample", {"dataset": "digits", "classifier": str(plugin)}, user="local:admin")
    with pytest.raises(PermissionDenied, match=REFUSED):  # known to the workspace, but never pinned
        workspace.registry.acting_as(ANNOTATOR).resolve(str(plugin), "classifier", "digits")
    assert not (tmp_path / "old.imported").exists()


class _Flip(torch.nn.Module):
    def __init__(self, sign: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 10)
        self.sign = sign

    def forward(self, x):
        return self.sign * self.linear(x.flatten(1))


def _export(path, sign: float) -> None:
    torch.manual_seed(0)
    batch = {0: torch.export.Dim("batch", min=1, max=4096)}
    program = torch.export.export(_Flip(sign).eval(), (torch.rand(2, 1, 8, 8),), dynamic_shapes=(batch,))
    torch.export.save(program, str(path))
    path.with_suffix(".json").write_text(json.dumps({"class_names": [str(i) for i in range(10)],
                                                     "input_shape": [1, 8, 8], "outputs": "logits"}))


def test_a_re_pointed_or_replaced_pt2_model_file_is_refused_until_an_admin_uses_it_again(workspace, tmp_path):
    first, second = tmp_path / "first" / "model.pt2", tmp_path / "second" / "model.pt2"
    for path, sign in ((first, 1.0), (second, -1.0)):
        path.parent.mkdir()
        _export(path, sign)
    link_folder = tmp_path / "served"
    link_folder.mkdir()
    link = link_folder / "model.pt2"
    link.symlink_to(first)
    (link_folder / "model.json").symlink_to(first.with_suffix(".json"))
    reference = str(link)
    _recorded(workspace, reference)
    annotator = workspace.registry.acting_as(ANNOTATOR)
    annotator.resolve(reference, "classifier", "digits")
    link.unlink()
    link.symlink_to(second)
    with pytest.raises(PermissionDenied, match=REFUSED):
        annotator.resolve(reference, "classifier", "digits")
    workspace.registry.resolve(reference, "classifier", "digits")  # an admin's use pins the new file
    images = torch.rand(3, 1, 8, 8)
    served = annotator.resolve(reference, "classifier", "digits").module(images)
    assert torch.allclose(served, workspace.registry.resolve(str(second), "classifier", "digits").module(images))
    _export(second, 2.0)  # replaced in place
    with pytest.raises(PermissionDenied, match=REFUSED):
        annotator.resolve(reference, "classifier", "digits")
