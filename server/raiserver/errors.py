"""What the service's own code raises when it refuses something. Domain code (jobs, quotas, the
fleet, submissions, storage) knows nothing of HTTP; ``app.py`` maps these to responses in one
handler: the status, ``{"detail": message}`` (the sentence the client prints), and Retry-After."""

from __future__ import annotations


class DomainError(Exception):
    status = 400
    refusal = "bad_request"  # the cause label of refused uploads in /metrics

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(int(self.retry_after), 1))} if self.retry_after is not None else {}


class BadArchive(DomainError):
    status, refusal = 400, "bad_archive"


class NotFound(DomainError):
    status, refusal = 404, "not_found"


class Unauthorized(DomainError):
    """No valid credentials. ``challenge``: the answer asks for Basic credentials (the API's
    clients then send their keys); a deactivated account or a worker without its token is not asked."""

    status, refusal = 401, "unauthorized"

    def __init__(self, message: str, challenge: bool = True):
        super().__init__(message)
        self.challenge = challenge

    @property
    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Basic"} if self.challenge else {}


class TooManyAttempts(DomainError):
    """Failed logins from one address or on one key: wait (Retry-After) before trying again."""

    status, refusal = 429, "throttled"

    def __init__(self, message: str, retry_after: float):
        super().__init__(message, retry_after)


class Forbidden(DomainError):
    """A rule of permissions.py says no."""

    status, refusal = 403, "forbidden"


class Missing(DomainError):
    """It was there and is gone (a job's archive no longer in storage)."""

    status, refusal = 410, "gone"


class Closed(DomainError):
    """A submission outside its kind's window: not open yet, past the deadline, or out of late days."""

    status, refusal = 403, "closed"


class Conflict(DomainError):
    status, refusal = 409, "conflict"


class TooLarge(DomainError):
    status, refusal = 413, "too_large"


class Invalid(DomainError):
    """A build file, queue, kind or image the service cannot run."""

    status, refusal = 422, "bad_build_file"


class OverQuota(DomainError):
    status, refusal = 429, "quota"

    def __init__(self, message: str, retry_after: float):
        super().__init__(message, retry_after)


class StorageFailing(DomainError):
    """The server's own storage refuses writes (unwritable, full, failing disk): nobody's fault
    but the operator's, and passing; 507 with Retry-After, so clients and workers wait and retry."""

    status, refusal = 507, "storage"

    def __init__(self, exc: OSError, retry_after: float = 30):
        super().__init__(f"the server's storage is failing ({exc.strerror or exc}); try again in {int(retry_after)} s", retry_after)


class DatabaseUnavailable(DomainError):
    """The service's database cannot be reached (restarting, killed, its pool exhausted): nobody's
    fault but the operator's, and passing; 503 with Retry-After, so clients and workers wait and
    retry instead of reading a 500 as a bug."""

    status, refusal = 503, "database"

    def __init__(self, retry_after: float = 5):
        super().__init__(f"the service's database is unavailable; try again in {int(retry_after)} s", retry_after)


class LogStoreUnavailable(DomainError):
    """Redis (the live logs, the queue's messages, leases and fences) cannot be reached: passing, as
    the database's absence is; 503 with Retry-After."""

    status, refusal = 503, "redis"

    def __init__(self, retry_after: float = 2):
        super().__init__(f"the service's log store (Redis) is unavailable; try again in {int(retry_after)} s", retry_after)


class Busy(DomainError):
    """A capacity limit of the service itself (streams per process), not the user's quota."""

    status, refusal = 503, "busy"
