"""What an actor may resolve through a registry: data sets, stored models, plugins and model files.

An actor who may not load files (``Permission.LOAD``) gets only an allowlist, decided on what a reference resolves to,
never on how it is spelled: ``default``, stored model ids, built generators, embedded data sets and the data sets,
plugins and model files an admin has used, as they were when used (their pins, :func:`pin_model_references`). An
admin's use pins what a reference resolves to now; a later change or re-pointing is refused, and the refusal is in
the account log (``probe users log``), before anything is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

from probe_core.catalog import DATASETS, generator_source
from probe_core.data import DATA_DIR_ENV, split_view
from probe_core.data.classes import split_class_map
from probe_core.data.files import is_file_reference, reference_pin
from probe_core.errors import DataError
from probe_core.models.files import is_model_file_reference, model_file_pin
from probe_core.models.plugins import PluginError, is_plugin_reference, plugin_pin
from probe_core.store import Store
from probe_core.team.accounts import Actor, Permission, refuse_unlisted


def may_load_files(actor: Actor | None) -> bool:
    """Whether ``actor`` (None: the local owner) may load any file: an admin's or the owner's registry."""
    return actor is None or actor.may(Permission.LOAD)


def names_model_file(reference: str | None) -> bool:
    """Whether a reference names a plugin or a model file (what the registry would import or load from a path)."""
    if not reference:
        return False
    return is_model_file_reference(reference) or is_plugin_reference(reference) or Path(reference).is_file()


def model_pin_now(reference: str) -> tuple[str, str] | None:
    """``(real path, fingerprint)`` of a plugin or model file reference now; None when its file is gone."""
    try:
        return model_file_pin(reference) if is_model_file_reference(reference) else plugin_pin(reference)
    except (PluginError, OSError):
        return None


def data_pin_now(reference: str) -> tuple[str, str] | None:
    """``(real path, fingerprint)`` of a data folder or file reference now; None when it is gone."""
    try:
        return reference_pin(reference)
    except DataError:
        return None


def check_dataset_access(store: Store, actor: Actor | None, data_dir, name: str) -> None:
    """Refuse a data set ``actor`` may not load, or pin a file-based one an admin uses.

    Raises
    ------
    PermissionDenied
        When the actor may not load files and ``name`` is neither an embedded data set (a view of one included) nor
        one the workspace holds (:meth:`Store.known_references`) as it was when an admin added it; the message
        names no path.
    """
    base, _ = split_view(name)
    if not may_load_files(actor):
        if data_dir is not None and str(data_dir) != os.environ.get(DATA_DIR_ENV, ""):
            refuse_unlisted(actor, "the server's data folder")
        if not (base in DATASETS or base in {split_view(known)[0] for known in store.known_references()}):
            refuse_unlisted(actor, "the embedded data sets and those an admin has added to the workspace")
        if is_file_reference(base) and data_pin_now(base) != store.reference_pin(base):
            # the folder or file was re-pointed or changed since an admin used it: not what was allowed
            refuse_unlisted(actor, "the data sets an admin has added, as they were when added")
    elif is_file_reference(base):
        pin = data_pin_now(base)
        if pin is not None and pin != store.reference_pin(base):
            store.pin_reference(base, *pin)


def check_model_reference(store: Store, actor: Actor | None, reference: str | None) -> None:
    """Refuse a model reference ``actor`` may not resolve: not a default, a stored model, a built generator or a
    reference the workspace holds, or a plugin or model file no longer what an admin pinned."""
    if may_load_files(actor) or reference in (None, "default"):
        return
    source = generator_source(reference)
    if source is not None and reference in source.choices:
        return
    known = store.known_references()
    if store.get_model(reference) is None and reference not in known | {split_class_map(k)[0] for k in known}:
        refuse_unlisted(actor, "the default models, stored models and built generators")
    require_pinned(store, actor, reference)


def require_pinned(store: Store, actor: Actor | None, reference: str) -> None:
    """For an actor who may not load files: a plugin or model file reference must resolve to what it was pinned
    to when an admin last used it (:func:`~probe_core.models.plugins.plugin_pin`,
    :func:`~probe_core.models.files.model_file_pin`); one re-pointed, edited or never pinned is refused, and
    the refusal is in the account log, before anything is imported."""
    if not names_model_file(reference) or store.get_model(reference) is not None:
        return
    now, pinned = model_pin_now(reference), store.reference_pin(reference)
    if now is None or now != pinned:
        store.log_account_event("reference-refused", actor.name,
                                detail=f"{reference}: {'gone' if now is None else 'changed or re-pointed'} since an "
                                       f"admin used it" if pinned else f"{reference}: never pinned by an admin's use")
        refuse_unlisted(actor, "the plugins and model files an admin has used, as they were when used")


def pin_model_references(store: Store, *references: str) -> None:
    """An admin's (or the local owner's) use of a plugin or model file pins what it resolves to now, under each
    name it is recorded by (as typed, and the loaded model's ``plugin:``/``modelfile:`` reference)."""
    for reference in references:
        if reference and names_model_file(reference) and store.get_model(reference) is None:
            pin = model_pin_now(reference)
            if pin is not None and pin != store.reference_pin(reference):
                store.pin_reference(reference, *pin)


def use_model_reference(store: Store, actor: Actor | None, *references: str) -> None:
    """Before a plugin or model file is imported: an admin's use pins it, anyone else's must match its pin."""
    if may_load_files(actor):
        pin_model_references(store, *references)
    else:
        require_pinned(store, actor, references[0])
