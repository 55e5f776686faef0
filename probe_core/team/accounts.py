"""Who may do what: workspace accounts, roles and the one permission check.

A workspace has no accounts at first: the dashboard then runs in single-user mode, as it always did
on localhost, and whoever runs it is the workspace's owner (an admin). Once one account exists (``probe
users add``) or sign-in is forced (``probe ui --auth``), the dashboard asks everyone to sign in, and
each person acts under their account's role:

- **annotators** label, browse runs, maps, saliency and reports, and download exports;
- **admins** also start runs, train and finetune models, load plugins, model files and data paths
  (which execute code or read files on the server), and manage suites and accounts.

Passwords are stored as salted bcrypt hashes (never the password). The CLI and the Python API run as
the local owner: whoever can run them already has the machine.
"""

from __future__ import annotations

import functools
import getpass
import math
import os
import re
import secrets
import time
from dataclasses import dataclass
from enum import Enum

import bcrypt

from probe_core.errors import ProbeError, printable

ANNOTATOR = "annotator"
ADMIN = "admin"
ROLES = (ANNOTATOR, ADMIN)
AUTH_ENV = "PROBE_AUTH"  # "1": ask for sign-in even before the first account exists (probe ui --auth)
INSECURE_ENV = "PROBE_INSECURE_NO_AUTH"  # "1": serve beyond localhost without accounts (probe ui --insecure-no-auth)
LOCAL_PREFIX = "local:"  # runs started from a shell on the server record "local:<os user>"
COOKIE_SECRET = "sign-in-cookie"
MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_BYTES = 72  # bcrypt's limit: longer passwords are refused, never silently cut
# Sign-in throttle: this many failed sign-ins of one account, or from one client, within the window lock that
# account (or client) out until the window has passed since the oldest of them.
MAX_FAILED_SIGN_INS = 10
# A sign-in lasts at most this long from the moment the password was given, however often it is used: the
# cookie is written once, at sign-in, and never renewed, and a live session ends at the same moment.
SIGN_IN_LIFETIME_S = 7 * 86400.0
FAILURE_WINDOW_SECONDS = 15 * 60
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.@-]{0,39}$")  # lower case: the sign-in form folds case


class Permission(str, Enum):
    """What a role allows; the value reads in a sentence ("may not <value>")."""

    LABEL = "label images"
    BROWSE = "browse runs and reports"
    EXPORT = "download exports"
    RUN = "start runs, train or finetune models"
    LOAD = "load plugins, model files or data paths"
    SUITES = "manage regression suites"
    USERS = "manage accounts"


ROLE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    ANNOTATOR: frozenset({Permission.LABEL, Permission.BROWSE, Permission.EXPORT}),
    ADMIN: frozenset(Permission),
}


class PermissionDenied(ProbeError):
    """The signed-in person's role does not allow this."""


@dataclass(frozen=True)
class Actor:
    """The person doing something: a signed-in account, or the local owner in single-user mode.

    Attributes
    ----------
    name : str
        The account name, or the operating-system user for the local owner.
    role : str
        ``"annotator"`` or ``"admin"``.
    signed_in : bool
        True for an account; False for the local owner (single-user mode, the CLI, the API).
    """

    name: str
    role: str
    signed_in: bool = False

    def may(self, permission: Permission) -> bool:
        return permission in ROLE_PERMISSIONS.get(self.role, frozenset())

    @property
    def recorded_name(self) -> str:
        """The name stored on the runs this person starts (``local:<user>`` for the local owner)."""
        return self.name if self.signed_in else f"{LOCAL_PREFIX}{self.name}"


def local_owner() -> Actor:
    """Whoever runs the CLI, the API or a single-user dashboard on this machine: an admin."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "owner"
    return Actor(name=name, role=ADMIN, signed_in=False)


def require(actor: Actor, permission: Permission) -> None:
    """Refuse what ``actor``'s role does not allow; the one check every front end and worker calls.

    Raises
    ------
    PermissionDenied
        When the role lacks ``permission``.
    """
    if not actor.may(permission):
        raise PermissionDenied(f"{actor.name} is signed in as an {actor.role} and may not {permission.value}; "
                               f"ask an admin")


def refuse_unlisted(actor: Actor, allowed: str) -> None:
    """Refuse a reference that resolved to nothing on ``actor``'s allowlist.

    The resolvers (:meth:`~probe_core.models.registry.ModelRegistry.resolve` and ``.dataset``) call this
    once they know what a reference is; the message names neither the reference nor any path, so it
    tells nothing about the server's files.

    Raises
    ------
    PermissionDenied
        Always.
    """
    raise PermissionDenied(f"{actor.name} is signed in as an {actor.role} and may use only {allowed}; "
                           f"plugins, model files and data paths are for admins (ask one to add what you need)")


def sign_in_required(store, forced: bool | None = None) -> bool:
    """Whether the dashboard asks people to sign in: once an account exists, or when forced.

    ``forced`` defaults to ``$PROBE_AUTH`` (set by ``probe ui --auth``).
    """
    if forced is None:
        forced = os.environ.get(AUTH_ENV, "") == "1"
    return bool(forced) or bool(store.list_users())


def _checked_name(name: str) -> str:
    name = (name or "").strip()
    if not _NAME.match(name):
        raise ProbeError(f"an account name is 1-40 lower-case letters, digits, '_', '.', '@' or '-', starting "
                         f"with a letter or digit; got {name!r}")
    return name


def _checked_role(role: str) -> str:
    if role not in ROLES:
        raise ProbeError(f"a role is one of {', '.join(ROLES)}; got {role!r}")
    return role


def _password_hash(password: str) -> str:
    encoded = (password or "").encode()
    if password and password != password.strip():
        raise ProbeError("a password neither starts nor ends with a space (the sign-in form drops them)")
    if len(password or "") < MIN_PASSWORD_LENGTH:
        raise ProbeError(f"a password has at least {MIN_PASSWORD_LENGTH} characters")
    if len(encoded) > MAX_PASSWORD_BYTES:
        raise ProbeError(f"a password has at most {MAX_PASSWORD_BYTES} bytes (bcrypt's limit)")
    return bcrypt.hashpw(encoded, bcrypt.gensalt()).decode()


def add_account(store, name: str, role: str, password: str, *, actor: Actor | None = None) -> Actor:
    """Create an account with a salted bcrypt hash of ``password``; ``actor`` (default the local owner) must
    manage accounts.

    Raises
    ------
    ProbeError
        For a bad name, role or password, or a name already taken (nothing is stored then).
    """
    require(actor or local_owner(), Permission.USERS)
    name, role = _checked_name(name), _checked_role(role)
    if store.get_user(name) is not None:
        raise ProbeError(f"there is already an account {name!r} (probe users passwd to change its password)")
    store.put_user(name, role, _password_hash(password))
    store.log_account_event("added", name, detail=role)
    return Actor(name, role, signed_in=True)


def change_password(store, name: str, password: str, *, actor: Actor | None = None) -> None:
    """Replace an account's password and end every earlier sign-in of it (cookies and live sessions).

    Raises ProbeError for an unknown account or a bad password, PermissionDenied unless ``actor`` (default the
    local owner) manages accounts.
    """
    require(actor or local_owner(), Permission.USERS)
    account = _existing(store, name)
    store.put_user(account["name"], account["role"], _password_hash(password))
    record_sign_out(store, account["name"])
    store.log_account_event("password-changed", account["name"])


def set_role(store, name: str, role: str, *, actor: Actor | None = None) -> None:
    """Change an account's role and end every earlier sign-in of it. Raises ProbeError for an unknown account or
    role."""
    require(actor or local_owner(), Permission.USERS)
    account = _existing(store, name)
    store.put_user(account["name"], _checked_role(role), account["password_hash"])
    record_sign_out(store, account["name"])
    store.log_account_event("role-changed", account["name"], detail=f"{account['role']} -> {role}")


def remove_account(store, name: str, *, actor: Actor | None = None) -> None:
    """Delete an account; its labels and runs keep its name. Raises ProbeError for an unknown account,
    PermissionDenied unless ``actor`` (default the local owner) manages accounts."""
    require(actor or local_owner(), Permission.USERS)
    removed = _existing(store, name)["name"]
    store.delete_user(removed)
    store.log_account_event("removed", removed)


def list_accounts(store, *, actor: Actor | None = None) -> list[dict]:
    """Accounts without their hashes: ``name``, ``role``, ``created_at``, ``changed_at`` (for an ``actor`` who
    manages accounts; default the local owner)."""
    require(actor or local_owner(), Permission.USERS)
    return [{key: value for key, value in row.items() if key != "password_hash"} for row in store.list_users()]


def _existing(store, name: str) -> dict:
    account = store.get_user((name or "").strip())
    if account is None:
        raise ProbeError(f"there is no account {name!r} (probe users list)")
    return account


def shell_annotator(store, name: str) -> str:
    """The annotator a label typed in a shell is stored under: the name as given in single-user mode; in a
    team workspace ``local:NAME``, so a shell on the server never labels as (or counts for) a signed-in account.

    Raises
    ------
    ProbeError
        For an empty name.
    """
    name = " ".join((name or "").split())
    if not name:
        raise ProbeError("--annotator NAME is required to store a label")
    if not store.list_users() or name.startswith(LOCAL_PREFIX):
        return name
    return f"{LOCAL_PREFIX}{name}"


def account_actor(store, name: str) -> Actor | None:
    """The actor of an existing account (as signed in), or None when the account is gone."""
    account = store.get_user(name)
    return None if account is None else Actor(account["name"], account["role"], signed_in=True)


def record_sign_out(store, name: str, when: float | None = None) -> None:
    """Remember that an account signed out: no sign-in cookie issued before now signs it in again.

    A browser deletes its cookie a moment after the click (in a component); a reload before that, a copied
    cookie, or another browser's remembered sign-in must not bring the session back.
    """
    store.set_signed_out(name, time.time() if when is None else when)
    store.log_account_event("sign-out", name, at=when)


def cookie_counts(store, name: str, issued_at: float, now: float | None = None) -> bool:
    """Whether a sign-in of ``name`` made (or a cookie issued) at ``issued_at`` still holds: it is younger than
    :data:`SIGN_IN_LIFETIME_S`, and the account exists and has not signed out, changed its password or role, or
    been made anew since."""
    now = time.time() if now is None else now
    if not 0 <= now - issued_at < SIGN_IN_LIFETIME_S:
        return False
    account = store.get_user(name)
    return account is not None and issued_at > (account.get("signed_out_at") or 0.0)


def lockout_seconds(store, name: str, client: str, now: float | None = None) -> float:
    """How long sign-in stays refused for this account or this client (0: not locked out).

    Locked out after :data:`MAX_FAILED_SIGN_INS` failures of the account, or from the client, within
    :data:`FAILURE_WINDOW_SECONDS`; it ends when the window has passed since the oldest of those failures.
    """
    now = time.time() if now is None else now
    since = now - FAILURE_WINDOW_SECONDS
    waits = [0.0]
    for column in ({"name": name}, {"client": client}):
        if not next(iter(column.values())):
            continue
        failures = store.account_events(since, ("sign-in-failed", SIGN_IN_CHECKING), limit=MAX_FAILED_SIGN_INS,
                                        **column)
        if len(failures) >= MAX_FAILED_SIGN_INS:
            waits.append(failures[-1]["at"] + FAILURE_WINDOW_SECONDS - now)
    return max(waits)


@functools.lru_cache(maxsize=1)
def _unknown_account_hash() -> str:
    """bcrypt of a password nobody has, checked for unknown names: a failure costs the same whether or not the
    account exists, so the time of a reply does not tell which names are accounts."""
    return bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt()).decode()


# A sign-in attempt is recorded as this kind before its password is checked, and counted as a failure until the
# check says otherwise (a process killed mid-check leaves it counted).
SIGN_IN_CHECKING = "sign-in-checking"
MAX_LOGGED_TEXT = 80  # a logged client address or detail is cut to this many characters


def loggable_name(name: str) -> str:
    """What the account log stores for a typed name: the name when it could be an account, else a placeholder.

    Anybody can type anything in the sign-in form; only text of an account name's form (lower-case letters,
    digits, ``_.@-``, at most 40 characters) reaches the log, so it cannot carry control characters, escape
    sequences or megabytes.
    """
    if _NAME.match(name or ""):
        return name
    return f"(not an account name: {len(name or '')} characters)"


def _loggable_text(text: str) -> str:
    return printable(text or "")[:MAX_LOGGED_TEXT]


def verify_sign_in(store, name: str, password: str, client: str = "") -> Actor:
    """Check a sign-in: the throttle first, then the password (bcrypt, at the same cost for unknown names).

    The attempt is counted before its password is checked, in the same write transaction as the throttle's
    count (:meth:`~probe_core.store.team.TeamTables.reserve_sign_in_attempt`): parallel guesses are serialised
    there, so at most :data:`MAX_FAILED_SIGN_INS` of them within the window reach bcrypt, however many arrive
    at once. Every attempt is logged (``sign-in``, ``sign-in-failed``, ``locked-out``), under
    :func:`loggable_name`.

    Raises
    ------
    PermissionDenied
        Locked out (the message says how long to wait), or a wrong name or password (one message for both).
    """
    name = " ".join((name or "").split()).lower()
    password = (password or "").strip()
    logged, client = loggable_name(name), _loggable_text(client)
    now = time.time()
    attempt = store.reserve_sign_in_attempt(logged, client, now - FAILURE_WINDOW_SECONDS, MAX_FAILED_SIGN_INS,
                                            "sign-in-failed", SIGN_IN_CHECKING, "locked-out")
    if attempt is None:
        wait = max(lockout_seconds(store, logged, client, now), 60.0)
        raise PermissionDenied(f"too many failed sign-ins: wait {math.ceil(wait / 60)} minute(s) and try again")
    account = store.get_user(name) if logged == name else None
    stored = account["password_hash"] if account is not None else _unknown_account_hash()
    try:
        matches = bcrypt.checkpw(password.encode()[:MAX_PASSWORD_BYTES], stored.encode())
    except ValueError:
        matches = False
    if account is None or not matches:
        store.settle_account_event(attempt, "sign-in-failed")
        raise PermissionDenied("wrong name or password")
    store.settle_account_event(attempt, "sign-in")
    return Actor(account["name"], account["role"], signed_in=True)


def account_log(store, since: float = 0.0, limit: int = 200, *, actor: Actor | None = None) -> list[dict]:
    """The account log, newest first: ``at``, ``kind``, ``name``, ``client``, ``detail`` (for an ``actor`` who
    manages accounts; default the local owner)."""
    require(actor or local_owner(), Permission.USERS)
    return store.account_events(since, limit=limit)


def cookie_secret(store) -> str:
    """The workspace's secret that signs sign-in cookies (made on first use, kept in the database)."""
    return store.secret(COOKIE_SECRET, lambda: secrets.token_urlsafe(32))


def check_run_starter(store, run) -> None:
    """A worker's check before it runs ``run``: a run recorded for an account needs an admin account now.

    Runs started from a shell on the server (``local:<user>``) and runs from before accounts pass.

    Raises
    ------
    PermissionDenied
        When the account that started the run is gone or is not an admin.
    """
    user = getattr(run, "user", None)
    if not user or user.startswith(LOCAL_PREFIX):
        return
    actor = account_actor(store, user)
    if actor is None:
        raise PermissionDenied(f"run {run.id} was started by {user!r}, which is no longer an account")
    require(actor, Permission.RUN)


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def check_exposure(host: str, has_accounts: bool, forced_auth: bool, insecure_no_auth: bool) -> str | None:
    """Refuse to serve beyond this machine with nobody signing in; returns a warning to print, if any.

    Raises
    ------
    ProbeError
        For a host other than localhost when the workspace has no accounts and sign-in is not forced,
        unless ``insecure_no_auth``.
    """
    if forced_auth and not has_accounts:
        raise ProbeError("--auth with no accounts would let nobody in: add one first "
                         "(probe users add NAME --role admin)")
    if host in LOCAL_HOSTS or has_accounts:
        return None
    if not insecure_no_auth:
        raise ProbeError(f"serving on {host} reaches beyond this machine, and this workspace has no "
                         f"accounts, so anyone who reaches the port could start runs and load plugins (which "
                         f"execute code). Add accounts first (probe users add NAME --role admin), or pass "
                         f"--insecure-no-auth (probe ui) on a network you trust")
    return (f"warning: serving on {host} without sign-in (--insecure-no-auth): anyone who reaches the port "
            f"acts as an admin, and the model and plugin loaders execute code")
