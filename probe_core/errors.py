"""Exceptions with messages meant for the user.

Every error that the CLI or the dashboard shows to a user is a ``ProbeError``
(a ``ValueError``), so front ends can catch one type and print its message
without a traceback.
"""


class ProbeError(ValueError):
    """Bad input or a failed precondition, with a message that says what to do."""


class DataError(ProbeError):
    """A data set is missing, malformed or unknown."""


class PluginError(ProbeError):
    """A user plugin failed to import or returned outputs of the wrong form."""


class ModelNotFoundError(ProbeError):
    """No model with the requested id is in the registry."""


class CancelledError(Exception):
    """Raised inside a background job when the user asked to stop it."""
