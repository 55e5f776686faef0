"""An annotator cannot make the server import or read a file, however a reference is spelled.

The resolvers (``ModelRegistry.resolve`` and ``ModelRegistry.dataset``) decide on what a reference resolves to:
an annotator gets ``default``, stored models, built generators, embedded data sets and what the workspace
already holds, and every other reference is refused with a message that names no path.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from helpers import write_tiny_plugin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe_core.errors import ProbeError
from probe_core.team.accounts import Actor, PermissionDenied

ANNOTATOR = Actor("ann", "annotator", signed_in=True)
MARKER_CODE = """
from pathlib import Path as _Path
_Path(__file__).with_suffix(".imported").write_text("imported")
"""


def hostile_references(plugin: Path, model_file: Path, link: Path) -> list[str]:
    """Spellings that reach ``plugin`` (or a model file) through the resolver's parsing."""
    relative = os.path.relpath(plugin, Path.cwd())
    deep = "/".join([".."] * 12) + str(plugin)
    references = [
        str(plugin), f"plugin:{plugin}", relative, f"./{relative}", f"plugin:{relative}",
        f"x[/{deep}#class_map=a=b", f"x[{deep}", f"default[{deep}", f"{plugin}#class_map=0=0",
        f"{plugin}#sha256=00", f"{plugin}?x=1", f"plugin:{plugin}?", f"file://{plugin}", f"PLUGIN:{plugin}",
        quote(str(plugin)), quote(f"x[/{deep}#class_map=a=b", safe=""), str(link), f"plugin:{link}",
        f"modelfile:{model_file}", f"modelfile:x[/../..{model_file}", str(model_file), f" {plugin} ",
        f"{plugin}\x00", f"default#class_map=a=b[{deep}", f"scene:{plugin}", f"~/{relative}",
    ]
    return references


@pytest.fixture
def bait(tmp_path):
    (tmp_path / "bait").mkdir()
    plugin = write_tiny_plugin(tmp_path / "bait", extra=MARKER_CODE)
    model_file = tmp_path / "bait" / "model.pt"
    model_file.write_bytes(b"not a model")
    link = tmp_path / "bait" / "innocent_name"
    link.symlink_to(plugin)
    return plugin, model_file, link


def test_no_spelling_of_a_plugin_or_model_file_resolves_for_an_annotator(workspace, bait):
    plugin, model_file, link = bait
    registry = workspace.registry.acting_as(ANNOTATOR)
    for reference in hostile_references(plugin, model_file, link):
        for kind in ("classifier", "generator"):
            # refused (or, for "default" with a class map, not trained in this empty workspace): never imported
            with pytest.raises(ProbeError) as refused:
                registry.resolve(reference, kind, "digits")
            message = str(refused.value)
            assert str(plugin.parent) not in message and "bait" not in message, message
            assert not plugin.with_suffix(".imported").exists(), f"{reference!r} imported the plugin"
    # the same references as the local owner (an admin) do reach the plugin: the bait is real
    workspace.registry.resolve(str(plugin), "classifier", "digits")
    assert plugin.with_suffix(".imported").exists()


def test_no_spelling_of_a_data_path_loads_for_an_annotator(workspace, tmp_path):
    arrays = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(arrays, x=rng.random((20, 8, 8)), y=np.arange(20) % 2)
    folder = tmp_path / "imgs"
    folder.mkdir()
    registry = workspace.registry.acting_as(ANNOTATOR)
    for name in (str(arrays), f"arrays:{arrays}", f"images:{folder}", f"arrays:{arrays}[keep=0,1]",
                 f"digits[x]/../../{arrays}", f"ARRAYS:{arrays}", str(folder), f"images:{folder}?size=8",
                 "mnist[", f"digits\x00{arrays}"):
        # refused the same way whether the file exists or not: the message tells nothing of the server's files
        messages, missing = [], str(tmp_path)[:-1] + "\u00a7"  # a sibling folder that does not exist, same length
        for spelling in (name, name.replace(str(tmp_path), missing)):
            with pytest.raises(ProbeError) as refused:  # PermissionDenied, or the catalogue's unknown-name error
                registry.dataset(spelling)
            messages.append(str(refused.value).replace(missing, str(tmp_path)))
        assert messages[0] == messages[1], messages
    assert registry.dataset("digits").num_classes == 10  # embedded data sets stay open
    assert registry.dataset("digits[keep=0,1]").num_classes == 2


def test_an_annotator_may_open_what_an_admin_added_to_the_workspace(workspace, tmp_path):
    arrays = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(arrays, x=rng.random((40, 8, 8)), y=np.arange(40) % 2)
    reference = f"arrays:{arrays}"
    registry = workspace.registry.acting_as(ANNOTATOR)
    with pytest.raises(PermissionDenied):
        registry.dataset(reference)
    workspace.store.create_run("sample", {"dataset": reference, "classifier": "default"}, user="local:admin")
    workspace.registry.dataset(reference)  # the admin's run resolved it: pinned to what it is now
    assert registry.dataset(reference).num_classes == 2
    with pytest.raises(PermissionDenied):  # a data folder an annotator names is never the server's
        workspace.for_data_dir(str(tmp_path), actor=ANNOTATOR).registry.dataset("mnist")


def test_a_folder_or_file_re_pointed_after_an_admin_added_it_is_refused_until_an_admin_uses_it_again(workspace,
                                                                                                      tmp_path):
    """References are pinned to what they resolved to (real path and content): a symlink re-pointed or a file
    changed after an admin added it is not what was allowed (security round two, item 5)."""
    rng = np.random.default_rng(0)
    first, second = tmp_path / "first.npz", tmp_path / "second.npz"
    np.savez(first, x=rng.random((40, 8, 8)), y=np.arange(40) % 2)
    np.savez(second, x=rng.random((30, 8, 8)), y=np.arange(30) % 3)
    link = tmp_path / "data.npz"
    link.symlink_to(first)
    reference = f"arrays:{link}"
    workspace.store.create_run("sample", {"dataset": reference}, user="local:admin")
    workspace.registry.dataset(reference)  # an admin's use pins it
    annotator = workspace.registry.acting_as(ANNOTATOR)
    assert annotator.dataset(reference).num_classes == 2
    link.unlink()
    link.symlink_to(second)  # re-pointed after it was recorded
    with pytest.raises(PermissionDenied, match="as they were when added"):
        annotator.dataset(reference)
    link.unlink()
    link.symlink_to(first)
    assert annotator.dataset(reference).num_classes == 2  # the same file again is what was allowed
    np.savez(first, x=rng.random((40, 8, 8)), y=np.arange(40) % 4)  # changed in place
    with pytest.raises(PermissionDenied, match="as they were when added"):
        annotator.dataset(reference)
    workspace.registry.dataset(reference)  # the admin uses it again: pinned anew
    assert workspace.store.reference_pin(reference)[0] == str(first.resolve())
    annotator.dataset(reference)  # allowed again
    # a folder: its manifest (names, sizes, modification times) is the pin
    from PIL import Image

    folder = tmp_path / "folder"
    for name in ("a", "b"):
        (folder / name).mkdir(parents=True)
        for index in range(3):
            Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(folder / name / f"{index}.png")
    folder_reference = f"images:{folder}"
    workspace.store.create_run("sample", {"dataset": folder_reference}, user="local:admin")
    workspace.registry.dataset(folder_reference)
    assert annotator.dataset(folder_reference).num_classes == 2
    Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(folder / "a" / "new.png")
    with pytest.raises(PermissionDenied, match="as they were when added"):
        annotator.dataset(folder_reference)


_BAIT = {}


def _bait() -> Path:
    """One plugin per test process that writes a marker file when imported (outside any test's tmp_path, as
    hypothesis reruns a test body with its function-scoped fixtures shared)."""
    if "plugin" not in _BAIT:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="probe-bait-"))
        _BAIT["plugin"] = write_tiny_plugin(folder, "bait.py", extra=MARKER_CODE)
    return _BAIT["plugin"]


def _spellings(path: Path):
    """A reference built from pieces: a scheme or none, the path in one of its spellings, an option or none."""
    text = str(path)
    relative = os.path.relpath(path, Path.cwd())
    forms = st.sampled_from([
        text, relative, f"./{relative}", "/".join([".."] * 9) + text, quote(text), quote(text, safe=""),
        quote(quote(text, safe=""), safe=""), text.replace("/", "\\"), text.replace("/", "\uff0f"), text + "\x00",
        f"~/{relative}", f"file://{text}", text.upper(), f" {text} ", text[:-3] + ".PY"])
    prefixes = st.sampled_from(["", "plugin:", "PLUGIN:", "modelfile:", "images:", "arrays:", "file:", "scene:",
                                "x[/", "default[", "default#class_map=a=b["])
    suffixes = st.sampled_from(["", "#sha256=00", "#class_map=0=0", "?x=1", "?size=8", "[mislabel=1->2:0.5]", "]",
                                "#sha256=" + "0" * 64])
    return st.tuples(prefixes, forms, suffixes).map("".join)


@settings(max_examples=max(150, settings.default.max_examples),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_references_built_from_pieces_never_import_or_read_for_an_annotator(workspace, data):
    """Prefixes, path spellings (relative, traversal, URL- and double-encoded, backslashes, full-width slashes,
    NUL, case) and options combined by hypothesis (derandomized in CI): as an annotator every one is refused
    by both resolvers, and the bait plugin is never imported."""
    plugin = _bait()
    marker = plugin.with_suffix(".imported")
    reference = data.draw(_spellings(plugin))
    registry = workspace.registry.acting_as(ANNOTATOR)
    with pytest.raises(ProbeError):
        registry.resolve(reference, "classifier", "digits")
    with pytest.raises(ProbeError):
        registry.dataset(reference)
    assert not marker.exists(), reference
