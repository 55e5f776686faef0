"""Labels: annotators' labels of review images, clusters and samples, verdicts on test images, and the
history of every change (relabelling never loses the earlier value). Each label is written the moment
it is given, in one transaction with its history row."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Sequence

from probe_core.errors import ProbeError
from probe_core.store.connection import Database
from probe_core.store.records import LabelChange, LabelRecord, TestImageLabelRecord

# The source of a label a person gave (others: an oracle's name, an auto-labeller's).
HUMAN = "human"


def _checked_annotator(annotator: str | None) -> str:
    annotator = (annotator or "").strip()
    if not annotator:
        raise ProbeError("an annotator name is required to store a label")
    return annotator


def _record_change(connection: sqlite3.Connection, annotator: str, source: str, item: str, item_id: Any,
                   previous: sqlite3.Row | None, label: str | None) -> None:
    """Append one change of a label to its history (inside the writing transaction): relabelling never loses
    the earlier value."""
    connection.execute(
        "INSERT INTO label_history (annotator, source, item, item_id, old_label, new_label, changed_at) "
        "VALUES (?,?,?,?,?,?,?)",
        (annotator, source, item, str(item_id), None if previous is None else previous[0], label, time.time()))



class LabelTables(Database):
    """``labels``, ``test_image_labels`` and ``label_history``."""

    def set_label(self, annotator: str, *, cluster_id: int | None = None, sample_id: int | None = None,
                  review_image_id: int | None = None, label: str | None = None, is_failure: bool | None = None,
                  source: str = "human") -> int:
        """Write one label now, replacing this annotator's earlier label of the same item.

        Parameters
        ----------
        annotator : str
            Who labelled; must not be empty.
        cluster_id, sample_id, review_image_id : int
            Exactly one: what was labelled (a review image's label is also filed under its cluster).
        label : str, optional
            The correct class name, or ``"none"`` for "none of the above".
        is_failure : bool, optional
            Whether the annotator judged it a failure of the classifier.
        source : str
            ``"human"``, or ``"oracle:MODEL"`` for automatic labels (kept apart).
        """
        if review_image_id is not None:
            if cluster_id is not None or sample_id is not None or is_failure is not None:
                raise ProbeError("a review image's label is its class only: give the review image alone")
            return self.set_labels(annotator, [(review_image_id, label)], source=source)[0]
        return self._set_item_label(annotator, cluster_id, sample_id, label, is_failure, source)

    def _set_item_label(self, annotator: str, cluster_id: int | None, sample_id: int | None, label: str | None,
                        is_failure: bool | None, source: str) -> int:
        annotator = _checked_annotator(annotator)
        if (cluster_id is None) == (sample_id is None):
            raise ProbeError("a label is for exactly one cluster, one review image or one sample")
        column, item = ("cluster_id", cluster_id) if cluster_id is not None else ("sample_id", sample_id)
        extra = " AND review_image_id IS NULL" if column == "cluster_id" else ""
        with self.transaction() as connection:
            previous = connection.execute(f"SELECT label FROM labels WHERE annotator=? AND source=? AND {column}=?"
                                          f"{extra}", (annotator, source, item)).fetchone()
            _record_change(connection, annotator, source, column.removesuffix("_id"), item, previous, label)
            connection.execute(
                f"DELETE FROM labels WHERE annotator=? AND source=? AND {column}=?{extra}", (annotator, source, item)
            )
            cursor = connection.execute(
                f"INSERT INTO labels (annotator, source, {column}, label, is_failure, created_at) VALUES (?,?,?,?,?,?)",
                (annotator, source, item, label, None if is_failure is None else int(bool(is_failure)), time.time()),
            )
            return int(cursor.lastrowid)

    def set_labels(self, annotator: str, labels: Sequence[tuple[int, str]], source: str = "human") -> list[int]:
        """Label review images in one transaction: ``(review_image_id, label)`` pairs; returns the row ids.

        Each replaces this annotator's earlier label of the same image.
        """
        annotator = _checked_annotator(annotator)
        ids = []
        with self.transaction() as connection:
            for review_image_id, label in labels:
                row = connection.execute("SELECT cluster_id FROM review_images WHERE id=?",
                                         (review_image_id,)).fetchone()
                if row is None:
                    raise ProbeError(f"no review image {review_image_id}")
                previous = connection.execute("SELECT label FROM labels WHERE annotator=? AND source=? AND "
                                              "review_image_id=?", (annotator, source, review_image_id)).fetchone()
                _record_change(connection, annotator, source, "review_image", review_image_id, previous, label)
                connection.execute("DELETE FROM labels WHERE annotator=? AND source=? AND review_image_id=?",
                                   (annotator, source, review_image_id))
                cursor = connection.execute(
                    "INSERT INTO labels (annotator, source, cluster_id, review_image_id, label, created_at) "
                    "VALUES (?,?,?,?,?,?)", (annotator, source, row["cluster_id"], review_image_id, label, time.time()))
                ids.append(int(cursor.lastrowid))
        return ids

    def get_labels(self, *, cluster_id: int | None = None, sample_id: int | None = None,
                   review_image_id: int | None = None, source: str | None = None,
                   per_image: bool | None = None) -> list[LabelRecord]:
        """Labels, optionally for one item and one source, oldest first.

        ``per_image``: True for review-image labels only, False for whole-cluster and sample labels
        only, None for both.
        """
        sql, params = "SELECT * FROM labels WHERE 1=1", []
        for column, value in (("cluster_id", cluster_id), ("sample_id", sample_id),
                              ("review_image_id", review_image_id), ("source", source)):
            if value is not None:
                sql += f" AND {column}=?"
                params.append(value)
        if per_image is not None:
            sql += " AND review_image_id IS NOT NULL" if per_image else " AND review_image_id IS NULL"
        return [
            {
                "id": r["id"], "annotator": r["annotator"], "source": r["source"], "cluster_id": r["cluster_id"],
                "sample_id": r["sample_id"], "review_image_id": r["review_image_id"], "label": r["label"],
                "is_failure": None if r["is_failure"] is None else bool(r["is_failure"]), "created_at": r["created_at"],
            }
            for r in self._query(sql + " ORDER BY id", params)
        ]

    def sample_labels(self, run_id: int, source: str | None = None) -> dict[int, list[str]]:
        """Every label given to a run's samples, in one query: sample id -> labels, oldest first.

        Samples without a label are absent; ``source`` keeps only that source's labels.
        """
        sql = ("SELECT labels.sample_id, labels.label FROM labels JOIN samples ON samples.id = labels.sample_id "
               "WHERE samples.run_id=?")
        params: list = [run_id]
        if source is not None:
            sql += " AND labels.source=?"
            params.append(source)
        by_sample: dict[int, list[str]] = {}
        for row in self._query(sql + " ORDER BY labels.id", params):
            by_sample.setdefault(row["sample_id"], []).append(row["label"])
        return by_sample

    def set_test_image_label(self, annotator: str, dataset: str, test_index: int, label: str,
                             source: str = "human") -> int:
        """Write one verdict on a test image now, replacing this annotator's earlier one; returns the row id."""
        annotator = _checked_annotator(annotator)
        with self.transaction() as connection:
            previous = connection.execute("SELECT label FROM test_image_labels WHERE annotator=? AND source=? AND "
                                          "dataset=? AND test_index=?",
                                          (annotator, source, dataset, int(test_index))).fetchone()
            _record_change(connection, annotator, source, "test_image", f"{dataset}:{int(test_index)}", previous,
                           label)
            connection.execute("DELETE FROM test_image_labels WHERE annotator=? AND source=? AND dataset=? AND "
                               "test_index=?", (annotator, source, dataset, int(test_index)))
            cursor = connection.execute(
                "INSERT INTO test_image_labels (annotator, source, dataset, test_index, label, created_at) "
                "VALUES (?,?,?,?,?,?)", (annotator, source, dataset, int(test_index), label, time.time()))
            return int(cursor.lastrowid)

    def get_test_image_labels(self, dataset: str | None, test_index: int | None = None) -> list[TestImageLabelRecord]:
        """Verdicts on a data set's test images (``annotator``, ``source``, ``test_index``, ``label``), oldest first.

        ``dataset`` None: every data set's."""
        sql, params = "SELECT * FROM test_image_labels WHERE dataset=COALESCE(?, dataset)", [dataset]
        if test_index is not None:
            sql += " AND test_index=?"
            params.append(int(test_index))
        return [{"id": r["id"], "annotator": r["annotator"], "source": r["source"], "dataset": r["dataset"],
                 "test_index": r["test_index"], "label": r["label"], "created_at": r["created_at"]}
                for r in self._query(sql + " ORDER BY id", params)]

    def label_history(self, item: str | None = None, item_id: Any = None, annotator: str | None = None) -> list[LabelChange]:
        """Every change of a label, oldest first: ``annotator``, ``source``, ``item`` (``review_image``,
        ``cluster``, ``sample`` or ``test_image``), ``item_id``, ``old_label``, ``new_label``, ``changed_at``."""
        sql, params = "SELECT * FROM label_history WHERE 1=1", []
        for column, value in (("item", item), ("item_id", None if item_id is None else str(item_id)),
                              ("annotator", annotator)):
            if value is not None:
                sql += f" AND {column}=?"
                params.append(value)
        return [dict(row) for row in self._query(sql + " ORDER BY id", params)]
