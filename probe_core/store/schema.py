"""The workspace database's schema: one migration per version, applied in order when a store opens."""

from __future__ import annotations

SCHEMA_VERSION = 10

MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE models (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        dataset TEXT NOT NULL,
        path TEXT NOT NULL,
        spec TEXT NOT NULL,
        metrics TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        config TEXT NOT NULL,
        status TEXT NOT NULL,
        progress REAL NOT NULL DEFAULT 0,
        message TEXT NOT NULL DEFAULT '',
        details TEXT,
        result TEXT,
        error TEXT,
        owner TEXT NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        updated_at REAL NOT NULL,
        finished_at REAL
    );
    CREATE INDEX runs_by_kind ON runs(kind, id);
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        target_index INTEGER NOT NULL DEFAULT 0,
        chain INTEGER NOT NULL,
        step INTEGER NOT NULL,
        z BLOB NOT NULL,
        confidences BLOB NOT NULL,
        image BLOB,
        target_distance REAL,
        hit INTEGER,
        created_at REAL NOT NULL
    );
    CREATE INDEX samples_by_run ON samples(run_id, target_index, id);
    CREATE TABLE clusters (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        cluster_index INTEGER NOT NULL,
        weight REAL NOT NULL,
        size INTEGER NOT NULL,
        mean BLOB NOT NULL,
        covariance BLOB NOT NULL,
        info TEXT NOT NULL DEFAULT '{}',
        UNIQUE(run_id, cluster_index)
    );
    CREATE TABLE labels (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        annotator TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'human',
        cluster_id INTEGER REFERENCES clusters(id) ON DELETE CASCADE,
        sample_id INTEGER REFERENCES samples(id) ON DELETE CASCADE,
        label TEXT,
        is_failure INTEGER,
        created_at REAL NOT NULL,
        CHECK ((cluster_id IS NULL) != (sample_id IS NULL))
    );
    CREATE UNIQUE INDEX labels_one_per_cluster ON labels(annotator, source, cluster_id) WHERE cluster_id IS NOT NULL;
    CREATE UNIQUE INDEX labels_one_per_sample ON labels(annotator, source, sample_id) WHERE sample_id IS NOT NULL;
    """,
    2: """
    CREATE TABLE arrays (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        data BLOB NOT NULL,
        rows INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    """,
    3: """
    ALTER TABLE runs ADD COLUMN job TEXT;
    """,
    # Defuse's annotators label each of a cluster's review images (the paper's 10 samples); the images
    # are stored with their latent codes so every label keeps pointing at the same picture.
    4: """
    CREATE TABLE review_images (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        cluster_id INTEGER NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        z BLOB NOT NULL,
        image BLOB NOT NULL,
        prediction INTEGER NOT NULL,
        UNIQUE(cluster_id, position)
    );
    ALTER TABLE labels ADD COLUMN review_image_id INTEGER REFERENCES review_images(id) ON DELETE CASCADE;
    DROP INDEX labels_one_per_cluster;
    CREATE UNIQUE INDEX labels_one_per_cluster ON labels(annotator, source, cluster_id)
        WHERE cluster_id IS NOT NULL AND review_image_id IS NULL;
    CREATE UNIQUE INDEX labels_one_per_review_image ON labels(annotator, source, review_image_id)
        WHERE review_image_id IS NOT NULL;
    """,
    # People's verdicts on test-set images (the misclassification test-set baseline): is a confident
    # "mistake" a mislabelled test image or a real misclassification? Keyed by data set and index.
    5: """
    CREATE TABLE test_image_labels (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        annotator TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'human',
        dataset TEXT NOT NULL,
        test_index INTEGER NOT NULL,
        label TEXT NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE(annotator, source, dataset, test_index)
    );
    """,
    # Regression suites (probe_core/suites): named collections of checks per data set. A check keeps
    # its evidence (decoded images, latents, human labels) so it outlives the run and the generator it
    # came from; a score is one classifier's result on one check (the newest per pair is kept).
    6: """
    CREATE TABLE suites (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        dataset TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL
    );
    CREATE TABLE suite_checks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        suite_id INTEGER NOT NULL REFERENCES suites(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        found_on TEXT NOT NULL,
        evidence TEXT NOT NULL,
        data BLOB NOT NULL,
        added_version INTEGER NOT NULL,
        retired_version INTEGER,
        created_at REAL NOT NULL
    );
    CREATE INDEX suite_checks_by_suite ON suite_checks(suite_id, id);
    CREATE TABLE suite_scores (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        check_id INTEGER NOT NULL REFERENCES suite_checks(id) ON DELETE CASCADE,
        classifier TEXT NOT NULL,
        suite_version INTEGER NOT NULL,
        accuracy REAL NOT NULL,
        confidence REAL,
        wrong_confidence REAL,
        count INTEGER NOT NULL,
        predictions BLOB NOT NULL,
        scored_at REAL NOT NULL,
        UNIQUE(check_id, classifier)
    );
    """,
    # Team labelling (probe_core/team/accounts.py): accounts with bcrypt hashes, the secret that signs the
    # dashboard's sign-in cookie, who started each run, and every change of a label (who, when, old -> new).
    7: """
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        password_hash TEXT NOT NULL,
        created_at REAL NOT NULL,
        changed_at REAL NOT NULL
    );
    CREATE TABLE workspace_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    ALTER TABLE runs ADD COLUMN user TEXT;
    CREATE TABLE label_history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        annotator TEXT NOT NULL,
        source TEXT NOT NULL,
        item TEXT NOT NULL,
        item_id TEXT NOT NULL,
        old_label TEXT,
        new_label TEXT,
        changed_at REAL NOT NULL
    );
    CREATE INDEX label_history_by_item ON label_history(item, item_id, id);
    """,
    8: """
    ALTER TABLE users ADD COLUMN signed_out_at REAL;
    """,
    # The account log (probe users log): sign-ins, failures, lock-outs, sign-outs and account changes.
    9: """
    CREATE TABLE account_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        client TEXT NOT NULL DEFAULT '',
        detail TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX account_events_by_name ON account_events(name, at);
    CREATE INDEX account_events_by_client ON account_events(client, at);
    """,
    # What each folder or .npz reference resolved to when an admin last used it (probe_core.data.files.reference_pin)
    10: """
    CREATE TABLE reference_pins (
        reference TEXT PRIMARY KEY,
        real_path TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        pinned_at REAL NOT NULL
    );
    """,
}
