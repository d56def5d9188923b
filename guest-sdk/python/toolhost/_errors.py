"""Typed tool errors, and OS file errors turned into them."""

from __future__ import annotations

import errno
import os


class ToolError(Exception):
    """A failure the tool reports: the model gets its kind, message and retry hint.

    Raise it from a handler: `raise ToolError("quota", "only 3 reports a day")`,
    or use a shortcut, `raise ToolError.not_found(f"no city named {name!r}")`.
    Write the message for the model: say what to change.
    """

    def __init__(self, kind: str, message: str, retryable: bool = False) -> None:
        # Anything given is made text: `ToolError.unavailable(e)` with an
        # exception is a natural thing to write, and the contract takes strings.
        kind, message = str(kind), str(message)
        super().__init__(message)
        #: Short machine-readable class, e.g. `not_found`.
        self.kind = kind
        #: What went wrong, written for the model.
        self.message = message
        #: Whether calling again (perhaps with other arguments) can succeed.
        self.retryable = bool(retryable)

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    def __repr__(self) -> str:
        return f"ToolError({self.kind!r}, {self.message!r}, retryable={self.retryable})"

    @classmethod
    def invalid_input(cls, message: str) -> ToolError:
        """The arguments are well-formed but make no sense: the model should fix them."""
        return cls("invalid_input", message, retryable=True)

    @classmethod
    def not_found(cls, message: str) -> ToolError:
        """What the arguments name does not exist."""
        return cls("not_found", message, retryable=True)

    @classmethod
    def unavailable(cls, message: str) -> ToolError:
        """Something the tool depends on failed; trying later may work."""
        return cls("unavailable", message, retryable=True)

    @classmethod
    def permission_denied(cls, message: str) -> ToolError:
        """The tool was refused something (a file, a host, a store) by its grants."""
        return cls("permission_denied", message)


class Refused(ToolError):
    """A question to the person (`ask`) got no answer.

    `reason` is `"declined"` or `"cancelled"` (the person's choice),
    `"unavailable"` (nobody could be asked) or `"invalid_question"` (the
    question or its schema is not one the host can show). Left uncaught,
    it reaches the model as a tool error of that kind.
    """

    def __init__(self, reason: str, message: str) -> None:
        prefix = {
            "declined": "the person declined: ",
            "cancelled": "the person dismissed the question: ",
            "unavailable": "nobody could be asked: ",
        }.get(reason, "")
        super().__init__(reason, prefix + message)
        #: Why there is no answer.
        self.reason = reason


def file_error(error: OSError, path: str | os.PathLike | None = None) -> ToolError:
    """The `ToolError` for `error`, raised while working on `path`.

    Under WASI a path outside every directory the manifest grants fails
    like a missing file. When neither the path nor any of its parents can
    be looked at, it is outside the grants: that becomes a
    `permission_denied` naming the fix, not a `not_found` the model would
    retry. Otherwise a missing file is `not_found` (retryable), a refused
    write `permission_denied`, a bad name `invalid_input`, anything else
    `io`. `path` defaults to the error's own `filename`.
    """
    path = os.fspath(path) if path is not None else error.filename
    reason = error.strerror or str(error)
    if path is None:
        return ToolError("io", reason)
    if _outside_grants(str(path)):
        return ToolError.permission_denied(
            f"{path} is outside this tool's file grants; use a path under a granted "
            "directory, or grant one in toolhost.toml with "
            'files = [{ host = "...", guest = "...", mode = "read-only" }]'
        )
    message = f"{path}: {reason}"
    code = error.errno
    if isinstance(error, FileNotFoundError) or code == errno.ENOENT:
        return ToolError.not_found(message)
    if isinstance(error, PermissionError) or code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ToolError.permission_denied(message)
    if code in (errno.EINVAL, errno.ENAMETOOLONG, errno.EILSEQ):
        return ToolError.invalid_input(message)
    return ToolError("io", message)


def _outside_grants(path: str) -> bool:
    """Whether neither `path` nor any parent of it can be stat'ed."""
    current = os.path.abspath(path)
    while True:
        try:
            os.stat(current)
            return False
        except OSError:
            parent = os.path.dirname(current)
            if parent == current:
                return True
            current = parent
