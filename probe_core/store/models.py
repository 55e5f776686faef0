"""The ``models`` table: the registry's metadata of trained models."""

from __future__ import annotations

import json
import sqlite3
import time

from probe_core.store.connection import Database
from probe_core.store.records import ModelRecord


class ModelTable(Database):
    """Rows of trained models (:class:`~probe_core.models.ModelRegistry` holds the rules)."""

    def put_model(self, model_id: str, kind: str, dataset: str, path: str, spec: dict, metrics: dict) -> None:
        """Insert or replace a model's metadata."""
        with self.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO models (id, kind, dataset, path, spec, metrics, created_at) VALUES (?,?,?,?,?,?,?)",
                (model_id, kind, dataset, path, json.dumps(spec, sort_keys=True), json.dumps(metrics), time.time()),
            )

    def get_model(self, model_id: str) -> ModelRecord | None:
        rows = self._query("SELECT * FROM models WHERE id = ?", (model_id,))
        return self._model_row(rows[0]) if rows else None

    def list_models(self, dataset: str | None = None, kind: str | None = None) -> list[ModelRecord]:
        """Model metadata, newest first, optionally filtered."""
        sql, params = "SELECT * FROM models WHERE 1=1", []
        if dataset is not None:
            sql += " AND dataset = ?"
            params.append(dataset)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        return [self._model_row(r) for r in self._query(sql + " ORDER BY created_at DESC", params)]

    def pin_reference(self, reference: str, real_path: str, fingerprint: str) -> None:
        """Record what a folder or .npz reference resolves to now (an admin's use; a later one replaces it)."""
        with self.transaction() as connection:
            connection.execute("INSERT INTO reference_pins (reference, real_path, fingerprint, pinned_at) "
                               "VALUES (?,?,?,?) ON CONFLICT(reference) DO UPDATE SET real_path=excluded.real_path, "
                               "fingerprint=excluded.fingerprint, pinned_at=excluded.pinned_at",
                               (reference, real_path, fingerprint, time.time()))

    def reference_pin(self, reference: str) -> tuple[str, str] | None:
        """``(real path, fingerprint)`` a reference was pinned to, or None."""
        rows = self._query("SELECT real_path, fingerprint FROM reference_pins WHERE reference=?", (reference,))
        return (rows[0]["real_path"], rows[0]["fingerprint"]) if rows else None

    def known_references(self) -> set[str]:
        """Every data set and model reference the workspace holds: the data sets its models and suites were
        made on, and the data sets, classifiers and generators its runs name (in their request, progress or
        result). Only admins and the local owner add these, so they are what an annotator may open again."""
        fields = " UNION ".join(f"SELECT json_extract({column}, '$.{key}') AS value FROM runs "
                                f"WHERE json_valid({column})"
                                for column in ("config", "details", "result")
                                for key in ("dataset", "classifier", "generator", "vae"))
        rows = self._query("SELECT dataset AS value FROM models UNION SELECT dataset FROM suites UNION " + fields, [])
        return {row["value"] for row in rows if isinstance(row["value"], str)}

    @staticmethod
    def _model_row(row: sqlite3.Row) -> ModelRecord:
        return {
            "id": row["id"], "kind": row["kind"], "dataset": row["dataset"], "path": row["path"],
            "spec": json.loads(row["spec"]), "metrics": json.loads(row["metrics"]), "created_at": row["created_at"],
        }
