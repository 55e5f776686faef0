"""What the pages, the CLI and reports read about suites: names, a check with its data, the score matrix, the
HTML report."""

from __future__ import annotations

from probe_core.defuse.labels import NONE_OF_THE_ABOVE
from probe_core.reporting.reports import suite_html_report
from probe_core.suites.scoring import CHECK_KINDS, NOVEL, require_suite
from probe_core.team.accounts import Actor, Permission, local_owner, require


def suite_names(store, dataset: str | None = None) -> list[str]:
    """The suites of a data set (every suite when None), oldest first."""
    return [suite["name"] for suite in store.list_suites(dataset)]


def suite_check(store, check_id: int, with_data: bool = True) -> dict | None:
    """One check with its evidence (and its arrays when ``with_data``); None if there is none."""
    return store.get_suite_check(check_id, with_data=with_data)


def scored_classifiers(store, suite_name: str) -> list[str]:
    """The classifiers scored on a suite, in the order they were first scored."""
    return list(dict.fromkeys(score["classifier"] for score in store.get_suite_scores(suite_name)))


def suite_matrix(store, suite_name: str) -> dict:
    """Checks × classifiers: ``suite``, ``checks`` (without their arrays), ``classifiers`` (in the order
    they were first scored) and ``cells`` ``{(check_id, classifier): score}``."""
    suite = require_suite(store, suite_name)
    checks = store.get_suite_checks(suite_name, with_data=False)
    scores = store.get_suite_scores(suite_name)
    classifiers = list(dict.fromkeys(score["classifier"] for score in scores))
    active = {check["id"] for check in checks}
    return {"suite": suite, "checks": checks, "classifiers": classifiers,
            "cells": {(s["check_id"], s["classifier"]): s for s in scores if s["check_id"] in active}}


def label_names(check: dict) -> list[str]:
    """The human label of each of a check's images, as class names (``none`` for a novel class)."""
    names = check["evidence"]["class_names"]
    return [NONE_OF_THE_ABOVE if label == NOVEL else names[label] for label in check["data"]["labels"]]


def suite_report(store, suite_name: str, images_per_check: int = 20, *, actor: Actor | None = None) -> str:
    """The self-contained HTML report of a suite: every check's images, labels and scores across versions
    (an export: ``actor``, default the local owner, must be allowed to download exports)."""
    require(actor or local_owner(), Permission.EXPORT)
    matrix = suite_matrix(store, suite_name)
    sections = []
    for summary in matrix["checks"]:
        check = store.get_suite_check(summary["id"])
        shown = slice(0, images_per_check)
        labels = label_names(check)
        sections.append({
            "title": f"Check {check['id']}: {check['name']}",
            "facts": {"kind": CHECK_KINDS.get(check["kind"], check["kind"]), "found on": check["found_on"],
                      "images": len(labels), "labels": ", ".join(sorted(set(labels))),
                      "added in suite version": check["added_version"]},
            "images": check["data"]["images"][shown],
            "scores": [{"classifier": classifier, "accuracy": f"{cell['accuracy'] * 100:.0f} %",
                        "confidence on the label": "–" if cell["confidence"] is None else f"{cell['confidence']:.2f}",
                        "confidence in the wrong answer": "–" if cell["wrong_confidence"] is None
                        else f"{cell['wrong_confidence']:.2f}",
                        "suite version": cell["suite_version"]}
                       for classifier in matrix["classifiers"]
                       if (cell := matrix["cells"].get((check["id"], classifier))) is not None],
        })
    grid = [[matrix["cells"].get((check["id"], classifier), {}).get("accuracy") for classifier in matrix["classifiers"]]
            for check in matrix["checks"]]
    return suite_html_report(f"Regression suite {suite_name}", matrix["suite"], [c["name"] for c in matrix["checks"]],
                             matrix["classifiers"], grid, sections)
