"""Signing in (streamlit-authenticator over the workspace's accounts) and who this session acts as.

Single-user mode (no accounts, no ``probe ui --auth``) is the default: nobody signs in and the session
acts as the local owner, an admin, as before. Once the workspace has an account, the router shows the
sign-in form before any page; the signed-in account is kept in ``st.session_state`` (per person) and a
signed cookie keeps it across reloads. Signing out records the time in the workspace, and a cookie issued
before it no longer signs in (the browser deletes its copy a moment later; a reload in between, or a copy,
must not bring the session back). Roles are read from the database on every check, so removing an
account or changing its role takes effect at the next click.
"""

from __future__ import annotations

import os
import time

import streamlit as st

from pages.ui.resources import get_workspace
from pages.ui.text import plain
from probe_core.api.ui import default_workspace_path
from probe_core.errors import ProbeError
from probe_core.team import accounts
from probe_core.team.accounts import Actor, Permission, PermissionDenied

COOKIE_NAME = "model_probe_sign_in"
COOKIE_DAYS = accounts.SIGN_IN_LIFETIME_S / 86400
ACTOR_KEY = "signed_in_actor"
SIGNED_IN_AT_KEY = "signed_in_at"  # when this session signed in: a later sign-out, password or role change ends it
BY_FORM_KEY = "signed_in_by_form"  # this session gave the password (it writes the cookie; a cookie's never renews)
COOKIE_WRITE_WINDOW_S = 120.0  # the cookie is written in the runs of the first two minutes after the form


def _cookie_issued_at(authenticator) -> float | None:
    """When the browser's sign-in cookie was written (its expiry less the lifetime), None without one."""
    cookie = authenticator.cookie_controller.get_cookie()
    return cookie["exp_date"] - COOKIE_DAYS * 86400 if cookie else None


def _store():
    return get_workspace(str(default_workspace_path().resolve())).store


def _credentials(store) -> dict:
    """The accounts in the form streamlit-authenticator reads (bcrypt hashes, never passwords)."""
    return {"usernames": {row["name"]: {"name": row["name"], "password": row["password_hash"],
                                        "roles": [row["role"]], "email": ""}
                          for row in store.list_users()}}


def needs_sign_in() -> bool:
    """Whether this session must pass the sign-in form first: accounts exist and nobody is signed in."""
    return accounts.sign_in_required(_store()) and not st.session_state.get("authentication_status")


def sign_in_form() -> None:
    """The page shown in place of every page until someone signs in (a signed cookie signs in at once)."""
    sign_in()


def sign_in() -> Actor | None:
    """The router's gate: the actor of this session, after the sign-in form when accounts exist.

    Returns None while nobody is signed in (the form is shown, the page must not run), or when the server
    is reachable beyond this machine with nobody to sign in (the refusal is shown).
    """
    store = _store()
    try:  # `streamlit run app.py --server.address 0.0.0.0` gets the same refusal as `probe ui --host 0.0.0.0`
        accounts.check_exposure(st.get_option("server.address") or "0.0.0.0",
                                accounts.sign_in_required(store, forced=False), os.environ.get(accounts.AUTH_ENV) == "1",
                                os.environ.get(accounts.INSECURE_ENV) == "1")
    except ProbeError as exc:
        st.error(plain(exc))
        return None
    if not accounts.sign_in_required(store):
        st.session_state.pop(ACTOR_KEY, None)
        return accounts.local_owner()
    # Imported here, in a script run: it declares its cookie component at import, and a component declared
    # before the server's runtime exists (``python app.py`` preloads the pages' modules) is never served.
    import streamlit_authenticator as stauth
    from streamlit_authenticator.utilities.exceptions import LoginError

    authenticator = stauth.Authenticate(_credentials(store), COOKIE_NAME, accounts.cookie_secret(store),
                                        COOKIE_DAYS, auto_hash=False)
    was_signed_in = bool(st.session_state.get("authentication_status"))
    if was_signed_in and st.session_state.get(SIGNED_IN_AT_KEY) is None:
        # signed in by a cookie (checked below before it was accepted) in a run that a rerun interrupted
        st.session_state[SIGNED_IN_AT_KEY] = _cookie_issued_at(authenticator) or time.time()
    if was_signed_in and not accounts.cookie_counts(store, st.session_state.get("username") or "",
                                                    st.session_state[SIGNED_IN_AT_KEY]):
        # signed out in another browser, the password or role changed since, or the sign-in is too old
        st.session_state.pop(ACTOR_KEY, None)
        st.session_state.pop(BY_FORM_KEY, None)
        authenticator.logout(location="unrendered")
        st.session_state["logout"] = True
        was_signed_in = False
        st.warning("Your sign-in has ended (signed out elsewhere, the account changed, or it is a week old): "
                   "sign in again.")
    if not was_signed_in:
        cookie = authenticator.cookie_controller.get_cookie()
        if cookie and not accounts.cookie_counts(store, cookie["username"], cookie["exp_date"] - COOKIE_DAYS * 86400):
            st.session_state["logout"] = True  # issued before its account signed out: ignored, then deleted
    try:  # a valid sign-in cookie signs in here; the form below is ours, so every attempt is throttled and logged
        authenticator.login(location="unrendered")
    except LoginError as exc:  # a cookie of an account that was removed
        st.error(f"Cannot sign in: {plain(exc)}")
        authenticator.logout(location="unrendered")
    if not st.session_state.get("authentication_status"):
        _sign_in_form(store, authenticator)
    status = st.session_state.get("authentication_status")
    actor = accounts.account_actor(store, st.session_state.get("username") or "") if status else None
    if actor is None:
        st.session_state.pop(ACTOR_KEY, None)
        if st.session_state.get("logout"):  # signed out here: keep the deleting component until it has run
            with st.sidebar:
                authenticator.cookie_controller.delete_cookie()
        return None
    st.session_state[ACTOR_KEY] = actor
    if not was_signed_in:  # signed in by this run's form or a cookie: draw the page without the form
        by_form = st.session_state.get(BY_FORM_KEY, False)
        st.session_state[SIGNED_IN_AT_KEY] = time.time() if by_form else (_cookie_issued_at(authenticator)
                                                                          or time.time())
        st.rerun()
    with st.sidebar:
        st.caption(f"Signed in as **{actor.name}** ({actor.role})")
        # The cookie is written by a browser component; rendered on every run (one stable element) of the
        # first minutes after the form, it lives long enough to write it however soon the next click comes.
        # It is never renewed: a sign-in ends SIGN_IN_LIFETIME_S after the password was given.
        if st.session_state.get(BY_FORM_KEY) and \
                time.time() - st.session_state[SIGNED_IN_AT_KEY] < COOKIE_WRITE_WINDOW_S:
            authenticator.cookie_controller.set_cookie()
        authenticator.logout("Sign out", location="sidebar", key="sign_out",
                             callback=lambda _: _signed_out(store, actor))
    if not st.session_state.get("authentication_status"):  # just signed out: show the form, not the page
        st.rerun()
    return actor


def _client() -> str:
    """The browser's address as the server sees it (behind a proxy: the proxy's), for the sign-in throttle."""
    address = st.context.ip_address
    return address if isinstance(address, str) and address else "unknown"


def _sign_in_form(store, authenticator) -> None:
    """The sign-in form: :func:`probe_core.team.accounts.verify_sign_in` decides (throttle, bcrypt, log); a success
    becomes streamlit-authenticator's signed-in state and its cookie."""
    with st.form("sign_in_form", enter_to_submit=False):
        st.subheader("Sign in to Model Probe")
        name = st.text_input("Name", autocomplete="username")
        password = st.text_input("Password", type="password", autocomplete="current-password")
        submitted = st.form_submit_button("Sign in")
    if not submitted:
        return
    try:
        actor = accounts.verify_sign_in(store, name, password, _client())
    except PermissionDenied as exc:
        st.session_state["authentication_status"] = False
        message = str(exc)
        st.error(message[:1].upper() + message[1:] + ".")
        return
    st.session_state.update(authentication_status=True, username=actor.name, name=actor.name, roles=[actor.role],
                            logout=False, **{BY_FORM_KEY: True})
    authenticator.cookie_controller.set_cookie()


def _signed_out(store, actor: Actor) -> None:
    st.session_state.pop(ACTOR_KEY, None)
    st.session_state.pop(BY_FORM_KEY, None)
    accounts.record_sign_out(store, actor.name)  # the cookie the browser may still hold no longer signs in


def current_actor() -> Actor:
    """Who this session acts as, with the role the database gives it now.

    Raises
    ------
    PermissionDenied
        When sign-in is required and nobody is signed in, or the account is gone.
    """
    store = _store()
    if not accounts.sign_in_required(store):
        return accounts.local_owner()
    signed_in = st.session_state.get(ACTOR_KEY)
    actor = None if signed_in is None else accounts.account_actor(store, signed_in.name)
    if actor is None:
        raise PermissionDenied("sign in first")
    if not accounts.cookie_counts(store, actor.name, st.session_state.get(SIGNED_IN_AT_KEY, 0.0)):
        raise PermissionDenied("your sign-in has ended (signed out elsewhere, or the account changed): sign in again")
    return actor


def may(permission: Permission) -> bool:
    """Whether this session may do it (to show or disable a control; the action checks again)."""
    try:
        return current_actor().may(permission)
    except PermissionDenied:
        return False


def require(permission: Permission) -> Actor:
    """This session's actor, when its role allows ``permission``.

    Raises
    ------
    PermissionDenied
        Otherwise (the page shows it with ``st.error``).
    """
    actor = current_actor()
    accounts.require(actor, permission)
    return actor
