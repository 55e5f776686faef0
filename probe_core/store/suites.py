"""Regression suites: versioned sets of checks with their data, and classifiers' scores on them."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Sequence

import numpy as np

from probe_core.errors import ProbeError
from probe_core.store.connection import Database, pack_array, pack_arrays, unpack_array, unpack_arrays
from probe_core.store.records import SuiteCheckRecord, SuiteRecord, SuiteScoreRecord


class SuiteTables(Database):
    """``suites``, ``suite_checks`` and ``suite_scores``."""

    def get_suite(self, name: str) -> SuiteRecord | None:
        """A suite by name: ``id``, ``name``, ``dataset``, ``version``, ``created_at``; None if there is none."""
        rows = self._query("SELECT * FROM suites WHERE name=?", (name,))
        return dict(rows[0]) if rows else None

    def list_suites(self, dataset: str | None = None) -> list[SuiteRecord]:
        """Suites, oldest first, optionally of one data set."""
        sql, params = "SELECT * FROM suites", ()
        if dataset is not None:
            sql, params = sql + " WHERE dataset=?", (dataset,)
        return [dict(r) for r in self._query(sql + " ORDER BY id", params)]

    def add_suite_check(self, suite: str, dataset: str, *, kind: str, name: str, found_on: str, evidence: dict,
                        arrays: dict[str, Any]) -> int:
        """Add a check to a suite (created for ``dataset`` when it does not exist) and bump its version.

        Returns the check id. A suite belongs to one data set: adding a check of another is refused.
        """
        suite = suite.strip()
        if not suite:
            raise ProbeError("a suite needs a name")
        with self.transaction() as connection:
            row = connection.execute("SELECT * FROM suites WHERE name=?", (suite,)).fetchone()
            if row is None:
                connection.execute("INSERT INTO suites (name, dataset, version, created_at) VALUES (?,?,0,?)",
                                   (suite, dataset, time.time()))
                row = connection.execute("SELECT * FROM suites WHERE name=?", (suite,)).fetchone()
            elif row["dataset"] != dataset:
                raise ProbeError(f"suite {suite!r} is for data set {row['dataset']}, not {dataset}: "
                                 f"use another suite name")
            version = row["version"] + 1
            connection.execute("UPDATE suites SET version=? WHERE id=?", (version, row["id"]))
            cursor = connection.execute(
                "INSERT INTO suite_checks (suite_id, kind, name, found_on, evidence, data, added_version, created_at) "
                "VALUES (?,?,?,?,?,?,?,?)", (row["id"], kind, name, found_on, json.dumps(evidence),
                                             pack_arrays(arrays), version, time.time()))
            return int(cursor.lastrowid)

    def retire_suite_check(self, check_id: int) -> None:
        """Take a check out of its suite from the next version on (its scores and evidence are kept)."""
        with self.transaction() as connection:
            row = connection.execute("SELECT suite_id, retired_version FROM suite_checks WHERE id=?",
                                     (check_id,)).fetchone()
            if row is None:
                raise ProbeError(f"no check {check_id}")
            if row["retired_version"] is not None:
                return
            version = connection.execute("SELECT version FROM suites WHERE id=?", (row["suite_id"],)).fetchone()[0] + 1
            connection.execute("UPDATE suites SET version=? WHERE id=?", (version, row["suite_id"]))
            connection.execute("UPDATE suite_checks SET retired_version=? WHERE id=?", (version, check_id))

    def get_suite_checks(self, suite: str, with_data: bool = True, include_retired: bool = False) -> list[SuiteCheckRecord]:
        """A suite's checks in the order they were added; ``data`` holds their arrays when ``with_data``."""
        sql = ("SELECT c.* FROM suite_checks c JOIN suites s ON s.id=c.suite_id WHERE s.name=?"
               + ("" if include_retired else " AND c.retired_version IS NULL") + " ORDER BY c.id")
        return [self._check_row(r, with_data) for r in self._query(sql, (suite,))]

    def get_suite_check(self, check_id: int, with_data: bool = True) -> SuiteCheckRecord | None:
        rows = self._query("SELECT * FROM suite_checks WHERE id=?", (check_id,))
        return self._check_row(rows[0], with_data) if rows else None

    @staticmethod
    def _check_row(row: sqlite3.Row, with_data: bool) -> SuiteCheckRecord:
        return {"id": row["id"], "suite_id": row["suite_id"], "kind": row["kind"], "name": row["name"],
                "found_on": row["found_on"], "evidence": json.loads(row["evidence"]),
                "added_version": row["added_version"], "retired_version": row["retired_version"],
                "created_at": row["created_at"], "data": unpack_arrays(row["data"]) if with_data else None}

    def put_suite_scores(self, classifier: str, suite_version: int, scores: Sequence[dict]) -> None:
        """One classifier's scores on checks, in one transaction (replacing its earlier scores of them).

        Each score has ``check_id``, ``accuracy``, ``confidence``, ``wrong_confidence``, ``count`` and
        ``predictions`` (N,).
        """
        with self.transaction() as connection:
            connection.executemany(
                "INSERT OR REPLACE INTO suite_scores (check_id, classifier, suite_version, accuracy, confidence, "
                "wrong_confidence, count, predictions, scored_at) VALUES (?,?,?,?,?,?,?,?,?)",
                [(s["check_id"], classifier, suite_version, s["accuracy"], s["confidence"], s["wrong_confidence"],
                  s["count"], pack_array(np.asarray(s["predictions"], dtype=np.int64)), time.time()) for s in scores])

    def get_suite_scores(self, suite: str, classifier: str | None = None) -> list[SuiteScoreRecord]:
        """Stored scores of a suite's checks (retired ones included), oldest first."""
        sql = ("SELECT x.* FROM suite_scores x JOIN suite_checks c ON c.id=x.check_id JOIN suites s "
               "ON s.id=c.suite_id WHERE s.name=?")
        params: list[Any] = [suite]
        if classifier is not None:
            sql += " AND x.classifier=?"
            params.append(classifier)
        return [{"check_id": r["check_id"], "classifier": r["classifier"], "suite_version": r["suite_version"],
                 "accuracy": r["accuracy"], "confidence": r["confidence"], "wrong_confidence": r["wrong_confidence"],
                 "count": r["count"], "predictions": unpack_array(r["predictions"]), "scored_at": r["scored_at"]}
                for r in self._query(sql + " ORDER BY x.scored_at, x.id", params)]
