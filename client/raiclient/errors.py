"""What a failed call to the server tells the student: one sentence and the exit status."""

from __future__ import annotations

import json

from raiprotocol.states import ExitCode


class ApiError(Exception):
    def __init__(
        self,
        message: str,
        code: int = ExitCode.CLIENT_ERROR,
        status: int | None = None,
        retry_after: str | None = None,
        transient: bool = False,
    ):
        super().__init__(message)
        self.code = code
        self.status = status
        self.retry_after = retry_after  # the server's Retry-After, where it gave one
        self.transient = transient  # the connection's trouble, not an answer: trying again may work


def detail_of(body: bytes, reason: str) -> str:
    """The server's explanation: FastAPI's ``detail`` (a sentence, or validation errors)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:300] or reason
    detail = parsed.get("detail") if isinstance(parsed, dict) else None
    if isinstance(detail, list):  # FastAPI's own validation errors
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail if isinstance(d, dict))
    return str(detail or parsed)


def refusal(status: int, body: bytes, reason: str, retry_after: str | None) -> ApiError:
    """The error for an answer that is not a success."""
    error = _refusal(status, detail_of(body, reason), retry_after)
    error.retry_after = retry_after
    return error


def _refusal(status: int, detail: str, retry_after: str | None) -> ApiError:
    if status == 401:
        return ApiError(
            f"the server rejected your credentials ({detail}); run 'raiclient login' or ask your instructor for a new profile",
            status=status,
        )
    if status == 429:
        suffix = f" (retry in {retry_after} s)" if retry_after and retry_after not in detail else ""
        return ApiError(detail + suffix, status=status)
    if status in (503, 507) and retry_after:  # a passing condition the server names (storage, capacity)
        return ApiError(detail, status=status)
    if status >= 500:
        return ApiError(f"the server had an internal error (HTTP {status}); try again, and tell your TA if it persists", status=status)
    return ApiError(detail, status=status)


def unreachable(server: str) -> ApiError:
    return ApiError(f"cannot reach the rai server at {server} (is it running? check RAI_SERVER or your profile)", transient=True)


def untrusted(server: str, why: str) -> ApiError:
    from .tls import untrusted_hint

    return ApiError(f"the certificate of {server} could not be verified ({why}); {untrusted_hint()}")


def no_answer(server: str) -> ApiError:
    return ApiError(f"the rai server at {server} did not answer in time; try again", transient=True)


def broke_off(server: str) -> ApiError:
    return ApiError(f"the connection to {server} broke off (the server may have restarted); try again", transient=True)
