"""``raiclient``: submit a project, follow it live, and get its results back."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from raiprotocol.models import JobState
from raiprotocol.profile import Profile, ProfileError, load_profile, write_profile
from raiprotocol.states import ExitCode, exit_code_for

from . import __version__, entry
from .api import Api
from .console import SERVER_OPT, connected, fail, open_api, out
from .errors import ApiError
from .output import LogPrinter, detached_line, finish, kib, print_results, queued_line, say, warn

app = typer.Typer(add_completion=False, no_args_is_help=True, help=entry.SUMMARY)


def follow_job(api: Api, job_id: str, after: int = 0) -> int:
    """Print the job's log as it comes; Ctrl-C detaches without cancelling."""
    last_position: int | None = None
    printer = LogPrinter()
    try:
        for kind, payload in api.follow(job_id, after=after):
            if kind == "lines":
                printer.batches(payload)
            elif kind == "status":
                pos = payload.get("position")
                if payload.get("state") == "queued" and pos and pos != last_position:
                    last_position = pos
                    say(queued_line(payload))
            elif kind == "reconnecting":
                line, pause = payload
                printer.flush()
                warn(f"connection lost; reconnecting in {pause:.1f} s (resuming after line {line})…")
            elif kind == "end":
                return finish(payload.model_dump(mode="json"), api.server)
    except KeyboardInterrupt:
        printer.flush()
        say(detached_line(job_id))
        return ExitCode.DETACHED
    except ApiError as exc:
        fail(str(exc), exc.code)
    fail("the log stream ended before the job did; 'raiclient status " + job_id + "' tells where it is", ExitCode.INFRA_ERROR)
    return ExitCode.INFRA_ERROR


@app.command()
def submit(
    path: Path = typer.Option(Path("."), "-p", "--path", help="project folder holding rai_build.yml"),
    queue: Optional[str] = typer.Option(None, "--queue", "-q", help="queue to run on (default: the server's)"),
    kind: str = typer.Option("dev", "--kind", help="submission kind, e.g. m1, m2, m3, final"),
    detach: bool = typer.Option(False, "--detach", "-d", help="queue the job and return at once"),
    server: Optional[str] = SERVER_OPT,
) -> None:
    """Upload a project folder and run its rai_build.yml on a GPU worker."""
    from .submit import run

    raise typer.Exit(run(path, queue, kind, detach, server))


@app.command()
def logs(
    job_id: str,
    follow: bool = typer.Option(False, "--follow", "-f", help="keep following until the job ends"),
    server: Optional[str] = SERVER_OPT,
) -> None:
    """Print a job's log (whole, or live with --follow)."""
    with connected(server) as api:
        job = api.job(job_id)
        if follow or job.state.finished:
            raise typer.Exit(follow_job(api, job_id))
        # not following a running job: print what exists so far and stop
        printer = LogPrinter()
        for kind, payload in api.follow(job_id, live=False):
            if kind == "lines":
                printer.batches(payload)
            elif kind in ("end", "caught_up"):
                break
        say(f"The job is {job.state.value}; follow it: raiclient logs {job_id} --follow")


@app.command()
def status(job_id: str, server: Optional[str] = SERVER_OPT) -> None:
    """Show one job's state; the exit status is the job's, as with submit."""
    with connected(server) as api:
        job = api.job(job_id)
    table = Table(show_header=False, box=None, padding=(0, 2))
    for key in ("id", "owner", "state", "queue", "kind", "image", "worker", "created_at", "started_at", "finished_at", "exit_code", "failed_command", "message", "position", "waiting"):
        value = getattr(job, key)
        if value is not None:
            table.add_row(key, Text(str(value.value if isinstance(value, JobState) else value)))
    out.print(table)
    if len(job.phases) > 1:
        timeline = Table("+ s", "step", "detail", title="Timeline", box=None, padding=(0, 2), title_justify="left")
        t0 = job.phases[0].at
        for ph in job.phases:
            timeline.add_row(f"{(ph.at - t0).total_seconds():8.3f}", Text(ph.name), Text(ph.detail or ""))
        out.print(timeline)
    print_results(job.results.model_dump() if job.results else None)
    raise typer.Exit(exit_code_for(job.state, job.exit_code) if job.state.finished else ExitCode.OK)


@app.command()
def queue(server: Optional[str] = SERVER_OPT) -> None:
    """Jobs waiting and running per queue, the workers serving it, and where your jobs stand."""
    with connected(server) as api:
        queues = api.queues()
    if not queues:
        out.print("No queue has jobs or live workers.")
        return
    table = Table("queue", "waiting", "running", "workers", "slots")
    for q in queues:
        table.add_row(Text(q.queue), str(q.waiting), str(q.running), str(q.workers), str(q.slots))
    out.print(table)
    for q in queues:
        for j in q.mine:
            if j.waiting:
                where = j.waiting
            elif j.state is JobState.queued:
                where = f"position {j.position} of {q.waiting}" + (f", about {j.eta_seconds:.0f} s" if j.eta_seconds else "")
            else:
                where = f"running on {j.worker}"
            say(f"Your job {j.id} on '{q.queue}': {where}")


@app.command()
def images(server: Optional[str] = SERVER_OPT) -> None:
    """The images each queue can run (those its live workers hold)."""
    with connected(server) as api:
        queues = api.images()
    if not queues:
        out.print("No live worker: jobs wait until one comes, and any image may be named meanwhile.")
        return
    for q in queues:
        table = Table("image", "workers", title=f"queue '{q.queue}' ({q.workers} live worker(s))", title_justify="left")
        if q.any_image:
            table.add_row(Text("(any: some workers run jobs without containers)"), "")
        for offer in q.images:
            table.add_row(Text(offer.image), f"{offer.workers}/{q.workers}")
        for image, what in q.pulling.items():
            table.add_row(Text(image), Text(what))
        out.print(table)


@app.command()
def history(limit: int = typer.Option(20, "-n", help="how many jobs"), server: Optional[str] = SERVER_OPT) -> None:
    """Your recent jobs, newest first."""
    with connected(server) as api:
        jobs = api.jobs(limit).jobs
    table = Table("job", "state", "kind", "queue", "submitted", "took", "op time")
    for job in jobs:
        took = f"{job.duration:.1f} s" if job.duration is not None else ""
        op = f"{job.results.op_time_total:g}" if job.results and job.results.op_time_total is not None else ""
        table.add_row(job.id, job.state.value, Text(job.kind), Text(job.queue), job.created_at.strftime("%Y-%m-%d %H:%M:%S"), took, op)
    out.print(table)


@app.command()
def download(
    job_id: str,
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="file to write (default: build-JOB.tar.gz)"),
    server: Optional[str] = SERVER_OPT,
) -> None:
    """Download a job's build folder as a .tar.gz."""
    api = open_api(server)
    dest = output or Path(f"build-{job_id}.tar.gz")
    try:
        size = api.download_build(job_id, dest)
    except ApiError as exc:
        dest.unlink(missing_ok=True)
        fail(str(exc), exc.code)
    finally:
        api.close()
    say(f"Saved {dest} ({kib(size)})")


@app.command()
def ranking(n: Optional[int] = typer.Option(None, "-n", help="show the top N"), server: Optional[str] = SERVER_OPT) -> None:
    """The leaderboard: each team's fastest valid run (yours is marked -->)."""
    with connected(server) as api:
        entries = api.leaderboard(n)
    table = Table("#", "team", "op time (s)", "correctness", "when", "gpu", "verified")
    for e in entries:
        name = Text(f"{e.name} -->", "bold") if e.mine else Text(e.name)
        op = f"{e.op_time:.6f}" + (f" ± {e.spread / 2:.6f}" if e.spread is not None else "")
        table.add_row(str(e.rank), name, op, f"{e.correctness:g}", e.when.strftime("%Y-%m-%d %H:%M"),
                      e.gpu or "", "✓" if e.verified else "")
    out.print(table if entries else "No valid run yet.")


@app.command()
def cancel(job_id: str, server: Optional[str] = SERVER_OPT) -> None:
    """Cancel a queued or running job."""
    with connected(server) as api:
        job = api.cancel(job_id)
    say(f"Job {job.id}: {job.state.value}" + (" (stopping)" if not job.state.finished else ""))


@app.command()
def login(
    server: str = typer.Option(..., "--server", envvar="RAI_SERVER", prompt=True),
    access_key: str = typer.Option(..., "--access-key", prompt=True),
    secret_key: str = typer.Option(..., "--secret-key", prompt=True, hide_input=True),
) -> None:
    """Check credentials with the server and write them to ~/.rai_profile."""
    profile = Profile(access_key=access_key, secret_key=secret_key, server=server.rstrip("/"))
    api = Api(profile)
    try:
        me = api.me()
    except ApiError as exc:
        fail(str(exc), exc.code)
    finally:
        api.close()
    profile = profile.with_(username=me.username, email=me.email, team=me.team, firstname=me.firstname, lastname=me.lastname)
    path = write_profile(profile)
    say(f"Logged in as {me.username} ({me.role}); profile written to {path}")


@app.command()
def version(server: Optional[str] = SERVER_OPT) -> None:
    """Print the client's version (and the server's, when a profile names one that answers)."""
    out.print(f"raiclient {__version__}")
    try:
        api = Api(load_profile(server), timeout=5)
    except ProfileError:
        return
    try:
        info = api.client.get("/healthz").json()
        out.print(f"server {api.server}: raiserver {info.get('version', '?')}")
    except Exception:  # noqa: BLE001 - the server's version is a courtesy
        out.print(f"server {api.server}: not reachable")
    finally:
        api.close()


def main() -> None:
    """The full command line (``entry.main`` answers --help and version without it)."""
    from .admin import admin

    app.add_typer(admin, name="admin")
    app()


if __name__ == "__main__":
    main()
