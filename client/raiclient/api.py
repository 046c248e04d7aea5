"""HTTP access to the rai server; every failure becomes one human sentence (ApiError)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

from raiprotocol import logwire
from raiprotocol.models import (
    AuditRow,
    CourseBuildIn,
    CourseBuildOut,
    Entry,
    FilesFreed,
    IssuedKeys,
    JobList,
    JobOut,
    PullBody,
    PullRequest,
    QueueImages,
    QueueSummary,
    RosterResult,
    UserOut,
    UserRow,
)
from raiprotocol.profile import Profile

from . import __version__, tls
from .errors import ApiError, broke_off, no_answer, refusal, unreachable, untrusted

CHUNK = 256 * 1024


def file_chunks(path: Path) -> Iterator[bytes]:
    """An upload body read as it is sent (image archives can be large)."""
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


class Api:
    def __init__(self, profile: Profile, timeout: float = 30.0, transport: httpx.BaseTransport | None = None):
        self.server = profile.server
        self.client = httpx.Client(
            base_url=profile.server,
            auth=(profile.access_key, profile.secret_key),
            timeout=httpx.Timeout(timeout, read=timeout),
            headers={"User-Agent": f"raiclient/{__version__}"},
            transport=transport,
            verify=tls.context(),
        )

    def close(self) -> None:
        self.client.close()

    # -- plumbing --------------------------------------------------------------------------------
    def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        try:
            resp = self.client.request(method, url, **kw)
        except httpx.ConnectError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise untrusted(self.server, str(exc).rsplit("] ", 1)[-1].split(" (_ssl", 1)[0]) from None
            raise unreachable(self.server) from None
        except httpx.TimeoutException:
            raise no_answer(self.server) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise broke_off(self.server) from None
        except httpx.HTTPError as exc:
            raise ApiError(f"talking to {self.server} failed: {exc}") from None
        self._check(resp)
        return resp

    def _check(self, resp: httpx.Response) -> None:
        if not resp.is_success:
            raise refusal(resp.status_code, resp.content, resp.reason_phrase, resp.headers.get("Retry-After"))

    # -- calls -----------------------------------------------------------------------------------
    def me(self) -> UserOut:
        return UserOut.model_validate(self._request("GET", "/api/v1/me").json())

    def queues(self) -> list[QueueSummary]:
        return [QueueSummary.model_validate(q) for q in self._request("GET", "/api/v1/queue").json()]

    def images(self) -> list[QueueImages]:
        return [QueueImages.model_validate(q) for q in self._request("GET", "/api/v1/images").json()]

    def pull_image(self, image: str) -> PullRequest:
        return PullRequest.model_validate(self._request("POST", "/api/v1/admin/images/pull", json=PullBody(image=image).model_dump()).json())

    def load_image(self, tar: Path) -> list[PullRequest]:
        return [PullRequest.model_validate(r) for r in self._request("POST", "/api/v1/admin/images/load", content=file_chunks(tar),
                             headers={"Content-Type": "application/x-tar", "Content-Length": str(tar.stat().st_size)},
                             timeout=httpx.Timeout(3600.0, connect=30.0)).json()]

    def install_course_build(self, kind: str, build_file: str, labels: str) -> CourseBuildOut:
        body = CourseBuildIn(build_file=build_file, labels=labels).model_dump()
        return CourseBuildOut.model_validate(self._request("PUT", f"/api/v1/admin/course/{kind}", json=body).json())

    def course_builds(self) -> list[CourseBuildOut]:
        return [CourseBuildOut.model_validate(r) for r in self._request("GET", "/api/v1/admin/course").json()]

    def job(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._request("GET", f"/api/v1/jobs/{job_id}").json())

    def jobs(self, limit: int = 20) -> JobList:
        return JobList.model_validate(self._request("GET", "/api/v1/jobs", params={"limit": limit}).json())

    def leaderboard(self, limit: int | None, board: str = "ranked") -> list[Entry]:
        params: dict[str, str | int] = {"n": limit} if limit else {}
        if board != "ranked":
            params["board"] = board
        return [Entry.model_validate(e) for e in self._request("GET", "/api/v1/leaderboard", params=params).json()]

    def import_roster(self, csv_text: str) -> RosterResult:
        return RosterResult.model_validate(self._request("POST", "/api/v1/admin/roster", content=csv_text.encode(),
                                                         headers={"Content-Type": "text/csv"}).json())

    def rotate_keys(self, username: str) -> IssuedKeys:
        return IssuedKeys.model_validate(self._request("POST", f"/api/v1/admin/users/{username}/keys").json())

    def revoke_keys(self, username: str) -> UserRow:
        return UserRow.model_validate(self._request("POST", f"/api/v1/admin/users/{username}/revoke").json())

    def audit(self, limit: int) -> list[AuditRow]:
        return [AuditRow.model_validate(r) for r in self._request("GET", "/api/v1/admin/audit", params={"limit": limit}).json()]

    def cancel(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._request("POST", f"/api/v1/jobs/{job_id}/cancel").json())

    def delete_files(self, job_id: str) -> FilesFreed:
        return FilesFreed.model_validate(self._request("DELETE", f"/api/v1/jobs/{job_id}/files").json())

    def download_build(self, job_id: str, dest: Path) -> int:
        try:
            with self.client.stream("GET", f"/api/v1/jobs/{job_id}/build.tar.gz") as resp:
                if not resp.is_success:
                    resp.read()
                    self._check(resp)
                written = 0
                with dest.open("wb") as fh:
                    for chunk in resp.iter_bytes(CHUNK):
                        fh.write(chunk)
                        written += len(chunk)
                return written
        except httpx.HTTPError as exc:
            raise ApiError(f"download from {self.server} failed: {exc.__class__.__name__}") from None

    def follow(self, job_id: str, after: int = 0, give_up_after: float | None = None,
               live: bool = True) -> Iterator[tuple[str, Any]]:
        """Yield ("lines", [Batch]), ("status", dict), ("reconnecting", (last line, delay)) and
        finally ("end", JobOut) events; with ``live=False``, ("caught_up", dict) instead once the
        lines written so far are out.

        Reconnects with exponential back-off and ``Last-Event-ID`` when the connection drops (bad
        Wi-Fi, server restart, a stream cut off for reading too slowly), so no line is lost or
        printed twice; honours ``Retry-After`` when the server is at its stream limit. Gives up
        (ApiError) after ``give_up_after`` seconds without progress (``RAI_RECONNECT_SECONDS``,
        default 300).
        """
        if give_up_after is None:
            give_up_after = float(os.environ.get("RAI_RECONNECT_SECONDS", "300"))
        last = after
        failing_since: float | None = None
        delay = 0.25
        while True:
            wait: float | None = None
            try:
                headers = {"Last-Event-ID": str(last)} if last else {}
                with connect_sse(
                    self.client, "GET", f"/api/v1/jobs/{job_id}/log", headers=headers,
                    params=None if live else {"follow": "false"},
                    timeout=httpx.Timeout(30.0, read=60.0),
                ) as source:
                    resp = source.response
                    if resp.status_code in (429, 503) and resp.headers.get("Retry-After", "").isdigit():
                        resp.read()
                        wait = float(resp.headers["Retry-After"])
                    elif not resp.is_success:
                        resp.read()
                        self._check(resp)
                    else:
                        for sse in source.iter_sse():
                            if sse.event == "lines":
                                fresh = [b for b in (x.after(last) for x in logwire.loads(sse.data)) if b is not None]
                                if fresh:
                                    last = fresh[-1].last
                                    failing_since, delay = None, 0.25
                                    yield "lines", fresh
                            elif sse.event == "status":
                                failing_since, delay = None, 0.25
                                yield "status", json.loads(sse.data)
                            elif sse.event == "end":
                                yield "end", JobOut.model_validate_json(sse.data)
                                return
                            elif sse.event == "caught_up":
                                yield "caught_up", json.loads(sse.data)
                                return
            except ApiError as exc:
                if exc.status is None or exc.status < 500:
                    raise
            except httpx.HTTPError:
                pass
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since >= give_up_after:
                raise ApiError(
                    f"lost the connection to {self.server} for {give_up_after:.0f} s; the job goes on. "
                    f"Resume with: raiclient logs {job_id} --follow --after {last}"
                )
            pause = wait if wait is not None else delay * (0.5 + random.random())
            pause = min(pause, max(0.0, failing_since + give_up_after - now))
            yield "reconnecting", (last, pause)
            time.sleep(pause)
            delay = min(delay * 2, 30.0)
