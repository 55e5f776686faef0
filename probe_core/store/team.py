"""The team's rows: accounts and the workspace's secrets (:mod:`probe_core.team.accounts` holds the rules)."""

from __future__ import annotations

import time
from typing import Any

from probe_core.store.connection import Database
from probe_core.store.records import UserRecord


class TeamTables(Database):
    """``users`` and ``workspace_secrets``."""

    def put_user(self, name: str, role: str, password_hash: str) -> None:
        """Insert an account or replace its role and hash (its creation time stays).

        A new account starts signed out at its creation: a cookie left from a removed account of the same name
        never signs it in.
        """
        now = time.time()
        with self.transaction() as connection:
            connection.execute(
                "INSERT INTO users (name, role, password_hash, created_at, changed_at, signed_out_at) "
                "VALUES (?,?,?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET role=excluded.role, password_hash=excluded.password_hash, "
                "changed_at=excluded.changed_at", (name, role, password_hash, now, now, now))

    def get_user(self, name: str) -> UserRecord | None:
        """An account: ``name``, ``role``, ``password_hash``, ``created_at``, ``changed_at``; None if none."""
        rows = self._query("SELECT * FROM users WHERE name=?", (name,))
        return dict(rows[0]) if rows else None

    def list_users(self) -> list[UserRecord]:
        """Every account, by name."""
        return [dict(row) for row in self._query("SELECT * FROM users ORDER BY name")]

    def set_signed_out(self, name: str, when: float) -> None:
        """Record that ``name`` signed out at ``when`` (a later sign-out only moves it forward)."""
        with self.transaction() as connection:
            connection.execute("UPDATE users SET signed_out_at=MAX(COALESCE(signed_out_at, 0), ?) WHERE name=?",
                               (when, name))

    def delete_user(self, name: str) -> bool:
        """Remove an account (its labels and runs keep its name); returns whether it existed."""
        with self.transaction() as connection:
            return connection.execute("DELETE FROM users WHERE name=?", (name,)).rowcount > 0

    def log_account_event(self, kind: str, name: str, client: str = "", detail: str = "",
                          at: float | None = None) -> None:
        """Append to the account log (``sign-in``, ``sign-in-failed``, ``locked-out``, ``sign-out``, ``added``...)."""
        with self.transaction() as connection:
            connection.execute("INSERT INTO account_events (at, kind, name, client, detail) VALUES (?,?,?,?,?)",
                               (time.time() if at is None else at, kind, name, client, detail))

    def reserve_sign_in_attempt(self, name: str, client: str, since: float, limit: int, counted: str,
                                pending: str, refused: str) -> int | None:
        """Count and record a sign-in attempt in one write transaction, so parallel attempts are serialised.

        The attempt is stored as ``pending`` (counted as a failure until the password is known good) unless
        ``limit`` events of kind ``counted`` or ``pending`` since ``since`` already name the account or come
        from the client; then a ``refused`` event is stored instead. Returns the pending event's id, or None
        when refused.
        """
        with self.transaction() as connection:
            for column, value in (("name", name), ("client", client)):
                if not value:
                    continue
                count = connection.execute(
                    f"SELECT COUNT(*) FROM account_events WHERE at >= ? AND kind IN (?, ?) AND {column} = ?",
                    (since, counted, pending, value)).fetchone()[0]
                if count >= limit:
                    connection.execute("INSERT INTO account_events (at, kind, name, client, detail) "
                                       "VALUES (?,?,?,?,?)", (time.time(), refused, name, client, ""))
                    return None
            return connection.execute("INSERT INTO account_events (at, kind, name, client, detail) VALUES "
                                      "(?,?,?,?,?)", (time.time(), pending, name, client, "")).lastrowid

    def settle_account_event(self, event_id: int, kind: str) -> None:
        """Give a reserved event its outcome (``sign-in`` or ``sign-in-failed``)."""
        with self.transaction() as connection:
            connection.execute("UPDATE account_events SET kind=? WHERE id=?", (kind, event_id))

    def account_events(self, since: float = 0.0, kinds: tuple[str, ...] | None = None, name: str | None = None,
                       client: str | None = None, limit: int = 1000) -> list[dict]:
        """Account log entries at or after ``since``, newest first, filtered by kinds, account and client."""
        sql, params = "SELECT * FROM account_events WHERE at >= ?", [since]
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        for column, value in (("name", name), ("client", client)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        return [dict(row) for row in self._query(sql + " ORDER BY at DESC, id DESC LIMIT ?", [*params, limit])]

    def secret(self, name: str, make: Any) -> str:
        """The workspace secret ``name``, made by ``make()`` and stored the first time it is asked for."""
        with self.transaction() as connection:
            row = connection.execute("SELECT value FROM workspace_secrets WHERE name=?", (name,)).fetchone()
            if row is not None:
                return row[0]
            value = str(make())
            connection.execute("INSERT INTO workspace_secrets (name, value) VALUES (?,?)", (name, value))
            return value
