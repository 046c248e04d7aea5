"""What a failed call to the server tells the student: one sentence and the exit status."""

from __future__ import annotations

import json

from raiprotocol.states import ExitCode

# Answers that say the server is away for now, not that the request is wrong: a proxy's while the
# server restarts (502, 504), the server's database (503) or storage (507) unavailable.
PASSING = (502, 503, 504, 507)


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
        # passing trouble, the connection's or the server's own (PASSING): trying again may work;
        # follow.stream and reconnect.riding try again on it, never on the student's own 4xx
        self.transient = transient


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
    error.transient = status in PASSING
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
    if status in (503, 507) and retry_after:  # a passing condition the server names (its database, storage, capacity)
        return ApiError(detail, status=status)
    if status in PASSING:  # a proxy's answer while the server restarts, or one without a reason
        return ApiError(f"the server is unavailable for now (HTTP {status}); try again in a minute", status=status)
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
