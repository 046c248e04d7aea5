"""The server's API as typed calls (pydantic models of ``raiprotocol``) for the full command line,
over the client's one transport (``transport.Http``); failures are ApiErrors with one sentence."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from raiprotocol.models import (
    AuditRow,
    CourseBuildIn,
    CourseBuildOut,
    Entry,
    ExtensionIn,
    ExtensionOut,
    FilesFreed,
    IssuedKeys,
    JobList,
    JobOut,
    KindIn,
    KindOut,
    KindsView,
    Limits,
    PullBody,
    PullRequest,
    QueueImages,
    QueueSummary,
    RegradeAction,
    RegradeIn,
    RegradeOut,
    RosterResult,
    SimilarityIn,
    SimilarityOut,
    UserOut,
    UserRow,
)
from raiprotocol.profile import Profile

from .transport import Http


class Api:
    def __init__(self, profile: Profile, timeout: float = 30.0):
        self.http = Http(profile, timeout=timeout)
        self.server = profile.server

    def close(self) -> None:
        self.http.close()

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        return self.http.json(method, path, **kw)

    # -- calls -----------------------------------------------------------------------------------
    def me(self) -> UserOut:
        return UserOut.model_validate(self._request("GET", "/api/v1/me"))

    def queues(self) -> list[QueueSummary]:
        return [QueueSummary.model_validate(q) for q in self._request("GET", "/api/v1/queue")]

    def images(self) -> list[QueueImages]:
        return [QueueImages.model_validate(q) for q in self._request("GET", "/api/v1/images")]

    def pull_image(self, image: str) -> PullRequest:
        return PullRequest.model_validate(self._request("POST", "/api/v1/admin/images/pull", json_body=PullBody(image=image).model_dump()))

    def load_image(self, tar: Path) -> list[PullRequest]:
        with tar.open("rb") as fh:  # read as it is sent: image archives can be large
            return [
                PullRequest.model_validate(r)
                for r in self._request(
                    "POST",
                    "/api/v1/admin/images/load",
                    body=fh,
                    timeout=3600.0,
                    headers={"Content-Type": "application/x-tar", "Content-Length": str(tar.stat().st_size)},
                )
            ]

    def install_course_build(self, kind: str, build_file: str, labels: str) -> CourseBuildOut:
        body = CourseBuildIn(build_file=build_file, labels=labels).model_dump()
        return CourseBuildOut.model_validate(self._request("PUT", f"/api/v1/admin/course/{kind}", json_body=body))

    def course_builds(self) -> list[CourseBuildOut]:
        return [CourseBuildOut.model_validate(r) for r in self._request("GET", "/api/v1/admin/course")]

    def job(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._request("GET", f"/api/v1/jobs/{job_id}"))

    def jobs(self, limit: int = 20) -> JobList:
        return JobList.model_validate(self._request("GET", "/api/v1/jobs", params={"limit": limit}))

    def leaderboard(self, limit: int | None, board: str = "ranked") -> list[Entry]:
        params: dict[str, str | int] = {"n": limit} if limit else {}
        if board != "ranked":
            params["board"] = board
        return [Entry.model_validate(e) for e in self._request("GET", "/api/v1/leaderboard", params=params)]

    def import_roster(self, csv_text: str) -> RosterResult:
        return RosterResult.model_validate(
            self._request("POST", "/api/v1/admin/roster", body=csv_text.encode(), headers={"Content-Type": "text/csv"})
        )

    def rotate_keys(self, username: str) -> IssuedKeys:
        return IssuedKeys.model_validate(self._request("POST", f"/api/v1/admin/users/{username}/keys"))

    def revoke_keys(self, username: str) -> UserRow:
        return UserRow.model_validate(self._request("POST", f"/api/v1/admin/users/{username}/revoke"))

    def audit(self, limit: int, action: str | None = None, actor: str | None = None) -> list[AuditRow]:
        params: dict[str, object] = {"limit": limit, **({"action": action} if action else {}), **({"actor": actor} if actor else {})}
        return [AuditRow.model_validate(r) for r in self._request("GET", "/api/v1/admin/audit", params=params)]

    def remeasure(self, job_id: str, repeats: int) -> JobOut:
        return JobOut.model_validate(self._request("POST", f"/api/v1/admin/jobs/{job_id}/remeasure", params={"repeats": repeats}))

    def rerun(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._request("POST", f"/api/v1/admin/jobs/{quote(job_id, safe='')}/rerun"))

    def kinds(self) -> KindsView:
        return KindsView.model_validate(self._request("GET", "/api/v1/kinds"))

    def limits(self) -> Limits:
        return Limits.model_validate(self._request("GET", "/api/v1/limits"))

    def set_kind(self, name: str, change: KindIn) -> KindOut:
        body = change.model_dump(mode="json", exclude_unset=True)
        return KindOut.model_validate(self._request("PUT", f"/api/v1/admin/kinds/{quote(name, safe='')}", json_body=body))

    def remove_kind(self, name: str) -> None:
        self._request("DELETE", f"/api/v1/admin/kinds/{quote(name, safe='')}")

    def extend(self, kind: str, ext: ExtensionIn) -> ExtensionOut:
        return ExtensionOut.model_validate(
            self._request(
                "POST", f"/api/v1/admin/kinds/{quote(kind, safe='')}/extensions", json_body=ext.model_dump(mode="json", exclude_none=True)
            )
        )

    def extensions(self, kind: str) -> list[ExtensionOut]:
        return [ExtensionOut.model_validate(e) for e in self._request("GET", f"/api/v1/admin/kinds/{quote(kind, safe='')}/extensions")]

    def unextend(self, kind: str, username: str | None, team: str | None) -> ExtensionOut:
        params = {k: v for k, v in (("username", username), ("team", team)) if v is not None}
        return ExtensionOut.model_validate(self._request("DELETE", f"/api/v1/admin/kinds/{quote(kind, safe='')}/extensions", params=params))

    def grades(self, kind: str, fmt: str, assignment: str | None) -> str:
        params = {"format": fmt, **({"assignment": assignment} if assignment else {})}
        resp = self.http.send("GET", f"/api/v1/admin/grades/{quote(kind, safe='')}", params=params, timeout=120.0)
        return self.http.read(resp).decode("utf-8")

    def ask_regrade(self, job_id: str, message: str) -> RegradeOut:
        return RegradeOut.model_validate(
            self._request("POST", f"/api/v1/jobs/{job_id}/regrade", json_body=RegradeIn.model_construct(message=message).model_dump())
        )

    def my_regrades(self) -> list[RegradeOut]:
        return [RegradeOut.model_validate(r) for r in self._request("GET", "/api/v1/regrades")]

    def regrades(self, everything: bool) -> list[RegradeOut]:
        params = {"all": "true"} if everything else {}
        return [RegradeOut.model_validate(r) for r in self._request("GET", "/api/v1/admin/regrades", params=params)]

    def answer_regrade(self, request_id: int, action: RegradeAction) -> RegradeOut:
        return RegradeOut.model_validate(self._request("POST", f"/api/v1/admin/regrades/{request_id}", json_body=action.model_dump()))

    def start_similarity(self, kind: str, starter: str) -> SimilarityOut:
        body = SimilarityIn.model_construct(kind=kind, starter=starter).model_dump()
        return SimilarityOut.model_validate(self._request("POST", "/api/v1/admin/similarity", json_body=body))

    def similarity(self, report_id: int, pairs: int = 20) -> SimilarityOut:
        return SimilarityOut.model_validate(self._request("GET", f"/api/v1/admin/similarity/{report_id}", params={"n": pairs}))

    def cancel(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self._request("POST", f"/api/v1/jobs/{job_id}/cancel"))

    def delete_files(self, job_id: str) -> FilesFreed:
        return FilesFreed.model_validate(self._request("DELETE", f"/api/v1/jobs/{job_id}/files"))

    def download_build(self, job_id: str, dest: Path) -> int:
        return self.http.download(f"/api/v1/jobs/{job_id}/build.tar.gz", dest)
