"""What runs produce: kept samples, failure clusters and their review images, and named array bundles."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Iterable

import numpy as np

from probe_core.errors import ProbeError
from probe_core.store.connection import Database, pack_array, pack_arrays, unpack_array, unpack_arrays
from probe_core.store.records import ClusterRecord, ReviewImageRecord, SampleRecord


class ResultTables(Database):
    """Samples, clusters, review images and array bundles, each belonging to a run."""

    def add_samples(self, run_id: int, samples: Iterable[dict]) -> int:
        """Append kept samples in one transaction.

        Each dict has ``chain``, ``step``, ``z`` (latent_dim,), ``confidences`` (K,),
        and optionally ``target_index``, ``image`` (C, H, W), ``target_distance``, ``hit``.
        Returns the number written.
        """
        now = time.time()
        rows = [
            (
                run_id, int(s.get("target_index", 0)), int(s["chain"]), int(s["step"]),
                pack_array(np.asarray(s["z"], dtype=np.float32)),
                pack_array(np.asarray(s["confidences"], dtype=np.float32)),
                None if s.get("image") is None else pack_array(np.asarray(s["image"], dtype=np.float32)),
                None if s.get("target_distance") is None else float(s["target_distance"]),
                None if s.get("hit") is None else int(bool(s["hit"])),
                now,
            )
            for s in samples
        ]
        with self.transaction() as connection:
            connection.executemany(
                "INSERT INTO samples (run_id, target_index, chain, step, z, confidences, image, target_distance, hit, "
                "created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
        return len(rows)

    def get_samples(self, run_id: int, target_index: int | None = None, limit: int | None = None,
                    newest_first: bool = False) -> list[SampleRecord]:
        """Stored samples of a run with arrays decoded."""
        sql, params = "SELECT * FROM samples WHERE run_id=?", [run_id]
        if target_index is not None:
            sql += " AND target_index=?"
            params.append(target_index)
        sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            {
                "id": r["id"], "run_id": r["run_id"], "target_index": r["target_index"], "chain": r["chain"],
                "step": r["step"], "z": unpack_array(r["z"]), "confidences": unpack_array(r["confidences"]),
                "image": unpack_array(r["image"]), "target_distance": r["target_distance"],
                "hit": None if r["hit"] is None else bool(r["hit"]),
            }
            for r in self._query(sql, params)
        ]

    def count_samples(self, run_id: int) -> int:
        return int(self._query("SELECT COUNT(*) FROM samples WHERE run_id=?", (run_id,))[0][0])

    def add_clusters(self, run_id: int, clusters: Iterable[dict]) -> list[int]:
        """Store clusters (``cluster_index``, ``weight``, ``size``, ``mean``, ``covariance``, ``info``)."""
        ids = []
        with self.transaction() as connection:
            for c in clusters:
                cursor = connection.execute(
                    "INSERT INTO clusters (run_id, cluster_index, weight, size, mean, covariance, info) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (run_id, int(c["cluster_index"]), float(c["weight"]), int(c["size"]),
                     pack_array(c["mean"]), pack_array(c["covariance"]), json.dumps(c.get("info", {}), default=float)),
                )
                ids.append(int(cursor.lastrowid))
        return ids

    def update_cluster_info(self, cluster_id: int, fields: dict) -> None:
        """Add ``fields`` to a cluster's ``info`` (what distillation learns of it after storing it)."""
        with self.transaction() as connection:
            row = connection.execute("SELECT info FROM clusters WHERE id=?", (cluster_id,)).fetchone()
            if row is None:
                return
            info = {**json.loads(row["info"]), **fields}
            connection.execute("UPDATE clusters SET info=? WHERE id=?", (json.dumps(info, default=float), cluster_id))

    def get_clusters(self, run_id: int) -> list[ClusterRecord]:
        """A run's clusters in index order, arrays decoded."""
        return [self._cluster_row(r)
                for r in self._query("SELECT * FROM clusters WHERE run_id=? ORDER BY cluster_index", (run_id,))]

    def get_cluster(self, cluster_id: int) -> ClusterRecord | None:
        rows = self._query("SELECT * FROM clusters WHERE id=?", (cluster_id,))
        return self._cluster_row(rows[0]) if rows else None

    @staticmethod
    def _cluster_row(row: sqlite3.Row) -> ClusterRecord:
        return {
            "id": row["id"], "run_id": row["run_id"], "cluster_index": row["cluster_index"], "weight": row["weight"],
            "size": row["size"], "mean": unpack_array(row["mean"]), "covariance": unpack_array(row["covariance"]),
            "info": json.loads(row["info"]),
        }

    def put_review_images(self, cluster_id: int, latents: np.ndarray, images: np.ndarray,
                          predictions: np.ndarray) -> list[int]:
        """Store a cluster's review images once; returns their ids in position order.

        A cluster that already has review images keeps them (labels point at them), so this is
        safe to call from several processes.

        Parameters
        ----------
        latents : np.ndarray
            (S, D) latent codes.
        images : np.ndarray
            (S, C, H, W) decoded images.
        predictions : np.ndarray
            (S,) the classifier's predicted class of each image.
        """
        with self.transaction() as connection:
            connection.executemany(
                "INSERT OR IGNORE INTO review_images (cluster_id, position, z, image, prediction) VALUES (?,?,?,?,?)",
                [(cluster_id, position, pack_array(np.asarray(z, dtype=np.float32)),
                  pack_array(np.asarray(image, dtype=np.float32)), int(prediction))
                 for position, (z, image, prediction) in enumerate(zip(latents, images, predictions))])
        return [image["id"] for image in self.get_review_images(cluster_id)]

    def get_review_images(self, cluster_id: int) -> list[ReviewImageRecord]:
        """A cluster's review images in position order: ``id``, ``position``, ``z``, ``image``, ``prediction``."""
        return [{"id": r["id"], "cluster_id": r["cluster_id"], "position": r["position"], "z": unpack_array(r["z"]),
                 "image": unpack_array(r["image"]), "prediction": r["prediction"]}
                for r in self._query("SELECT * FROM review_images WHERE cluster_id=? ORDER BY position",
                                     (cluster_id,))]


    def put_arrays(self, run_id: int, name: str, arrays: dict[str, Any]) -> None:
        """Store (or replace) a bundle of named arrays under ``(run_id, name)``.

        All arrays should share their first dimension (rows); a bundle is written in
        one transaction, so a reader sees either all of it or nothing.
        """
        if not arrays:
            raise ProbeError("put_arrays needs at least one array")
        rows = len(np.asarray(next(iter(arrays.values()))))
        with self.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO arrays (run_id, name, data, rows, created_at) VALUES (?,?,?,?,?)",
                (run_id, name, pack_arrays(arrays), rows, time.time()),
            )

    def get_arrays(self, run_id: int, name: str) -> dict[str, np.ndarray] | None:
        """The bundle stored under ``(run_id, name)``, or None."""
        rows = self._query("SELECT data FROM arrays WHERE run_id=? AND name=?", (run_id, name))
        return unpack_arrays(rows[0]["data"]) if rows else None

    def concat_arrays(self, run_id: int, prefix: str) -> dict[str, np.ndarray] | None:
        """All bundles whose name starts with ``prefix``, in name order, concatenated row-wise."""
        rows = self._query("SELECT data FROM arrays WHERE run_id=? AND substr(name, 1, ?)=? ORDER BY name",
                           (run_id, len(prefix), prefix))
        if not rows:
            return None
        bundles = [unpack_arrays(r["data"]) for r in rows]
        return {key: np.concatenate([b[key] for b in bundles]) for key in bundles[0]}

    def count_array_rows(self, run_id: int, prefix: str) -> int:
        """Total rows of the bundles whose name starts with ``prefix``."""
        return int(self._query("SELECT COALESCE(SUM(rows), 0) FROM arrays WHERE run_id=? AND substr(name, 1, ?)=?",
                               (run_id, len(prefix), prefix))[0][0])
