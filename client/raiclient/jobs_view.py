"""A student's own jobs in the terminal, on the standard library (``raiclient.pyz`` runs them on
a bare Python): ``status``, ``history``, ``cancel``, ``delete`` and ``download``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from raiprotocol.resultview import results_view
from raiprotocol.states import ExitCode, JobState, exit_code_for

from . import listings, table
from .errors import ApiError
from .output import cell, kib, local, print_results, say, waits
from .session import duration, fail, last_job_id, session, when

# status' rows, in order: the job's field and the name shown (times without their _at)
STATUS_FIELDS = (
    "id",
    "owner",
    "state",
    "queue",
    "kind",
    "image",
    "worker",
    "created_at",
    "started_at",
    "finished_at",
    "exit_code",
    "failed_command",
    "message",
    "position",
    "waiting",
    "late",
)


def status_rows(job: dict[str, Any]) -> list[tuple[str, str]]:
    """The job's state as name/value rows, every value of the job's through ``cell``."""
    rows = []
    for key in STATUS_FIELDS:
        value = job.get(key)
        if value is not None:
            rows.append((key.removesuffix("_at"), local(when(value)) if key.endswith("_at") else cell(value)))
    said = waits(job) if job.get("position") is not None else None
    if said:  # issues 37, 49: the wait as a range (or a guess, saying so) and why later jobs go first
        rows.append(("eta", cell(said if said == "starting now" else f"starts in {said}")))
    if job.get("position_why"):
        rows.append(("why", cell(job["position_why"])))
    return rows


def status(args: argparse.Namespace) -> int:
    """One job (your last one without an id); the exit status is the job's, as with submit."""
    if args.as_json:
        return listings.run(listings.Listing("status", args.server, job=args.job_id))
    with session(args.server) as conn:
        job = conn.json("GET", f"/api/v1/jobs/{args.job_id or last_job_id(conn)}")
    state = JobState(job["state"])
    table.pairs(status_rows(job))
    phases = job.get("phases") or []
    if len(phases) > 1:
        t0 = when(phases[0]["at"])
        rows = [(f"{(when(ph['at']) - t0).total_seconds():8.3f}", cell(ph["name"]), cell(ph.get("detail") or "")) for ph in phases]
        table.show(("+ s", "step", "detail"), rows, title="Timeline")
    print_results(job.get("results"))
    return exit_code_for(state, job.get("exit_code")) if state.finished else ExitCode.OK


def history(args: argparse.Namespace) -> int:
    """Your recent jobs, newest first: ids whole at any width (a narrow terminal loses 'took', then 'kind', …)."""
    if args.as_json:
        return listings.run(listings.Listing("history", args.server, limit=args.limit))
    with session(args.server) as conn:
        jobs = conn.json("GET", "/api/v1/jobs", params={"limit": args.limit})["jobs"]
    queues = len({job["queue"] for job in jobs}) > 1
    columns = ("job", "state", "kind", *(["queue"] if queues else []), "submitted", "took", "op time")
    rows = []
    for job in jobs:
        took = duration(job)
        op = results_view(job.get("results")).op_time_total
        rows.append(
            [
                cell(job["id"]),
                job["state"],
                cell(job["kind"]),
                *([cell(job["queue"])] if queues else []),
                local(when(job["created_at"]), seconds=False, year=False),
                f"{took:.1f} s" if took is not None else "",
                f"{op:g}" if op is not None else "",
            ]
        )
    table.show(columns, rows, drop=("took", "queue", "kind", "submitted"))
    return ExitCode.OK


def cancel(args: argparse.Namespace) -> int:
    with session(args.server) as conn:
        job = conn.json("POST", f"/api/v1/jobs/{args.job_id}/cancel")
    state = JobState(job["state"])
    say(f"Job {job['id']}: {state.value}" + (" (stopping)" if not state.finished else ""))
    return ExitCode.OK


def delete(args: argparse.Namespace) -> int:
    with session(args.server) as conn:
        for job_id in args.job_ids:
            freed = conn.json("DELETE", f"/api/v1/jobs/{job_id}/files")
            quota = f" of your {kib(freed['quota_bytes'])}" if freed.get("quota_bytes") else ""
            say(f"Job {freed['job_id']}: freed {kib(freed['freed_bytes'])}; you store {kib(freed['stored_bytes'])}{quota}")
    return ExitCode.OK


def download(args: argparse.Namespace) -> int:
    """The job's /build folder (your last job's without an id) as a .tar.gz."""
    with session(args.server) as conn:
        job_id = args.job_id or last_job_id(conn)
        dest = Path(args.output or f"build-{job_id}.tar.gz")
        try:
            size = conn.download(f"/api/v1/jobs/{job_id}/build.tar.gz", dest)
        except ApiError as exc:
            dest.unlink(missing_ok=True)
            fail(str(exc), exc.code)
            raise
    say(f"Saved {dest} ({kib(size)})")
    # the archive holds /build's files with no folder above them: unpacked as is, they land here
    folder = dest.name.removesuffix(".gz").removesuffix(".tgz").removesuffix(".tar") or "build"
    say(f"It has no folder of its own; to unpack it: mkdir {folder} && tar -xzf {dest} -C {folder}")
    return ExitCode.OK
