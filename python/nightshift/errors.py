"""The exceptions of the Nightshift client.

A call the coordinator refused raises the class of its gRPC code, carrying the code and
the coordinator's message; str() is what `nightshift` (the CLI) prints after "error: ".
Catch NightshiftError for all of them.
"""
from __future__ import annotations

from typing import Optional

import grpc


class NightshiftError(Exception):
    """Base of every error the client raises.

    `code` is the gRPC status code of a refused call (None for errors found on this side:
    settings, a spec file, a download that did not verify); `message` is the
    coordinator's message (or ours) without the code.
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, context: str = "") -> None:
        self.code = code
        self.message = message
        self.context = context
        text = f"{code.name}: {message}" if code is not None else message
        super().__init__(f"{context}: {text}" if context else text)


class SpecRefused(NightshiftError):
    """INVALID_ARGUMENT: the coordinator refused the spec or an argument; the message names the field."""


class NotFound(NightshiftError):
    """NOT_FOUND: no such job (or worker)."""


class PermissionDenied(NightshiftError):
    """PERMISSION_DENIED: the caller is known but may not do this (another user's job, an admin call)."""


class Unauthenticated(PermissionDenied):
    """UNAUTHENTICATED: no token, or one the coordinator does not know: fix the token."""


class FailedPrecondition(NightshiftError):
    """FAILED_PRECONDITION: not in this state (no model yet, deleting a running job): try later."""


class Unavailable(NightshiftError):
    """UNAVAILABLE or DEADLINE_EXCEEDED: nobody answered (in time); the call may be retried."""


class SettingsError(NightshiftError, ValueError):
    """A setting, spec file or argument is unusable before any call (the message names it)."""


class DownloadCorrupt(NightshiftError):
    """A downloaded model did not match its checksums; nothing was kept."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: SpecRefused,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
}


def from_rpc_error(error: grpc.RpcError, context: str = "") -> NightshiftError:
    """The exception for a failed call: its class by the call's code, with its message."""
    code_of = getattr(error, "code", None)
    details_of = getattr(error, "details", None)
    code = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    details = details_of() if callable(details_of) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    return _BY_CODE.get(code, NightshiftError)(str(details or ""), code, context)
