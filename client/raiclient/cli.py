"""``raiclient``: submit a project, follow it live, and get its results back."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from raiprotocol.models import JobState, VersionOut
from raiprotocol.profile import Profile, ProfileError, load_profile, write_profile
from raiprotocol.states import ExitCode, exit_code_for

from . import __version__, listings
from .about import SUMMARY, server_info, server_version
from .api import Api
from .console import JSON_OPT, SERVER_OPT, connected, fail, fit, open_api, print_json, show
from .errors import ApiError
from .listings import Listing
from .output import cell, kib, local, print_results, say, set_color

# plain help (click's): typer's rich help shows "<bool>" after every flag, as if it took a value
app = typer.Typer(no_args_is_help=True, help=SUMMARY, rich_markup_mode=None)


class Color(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


@app.callback()
def options(
    color: Color = typer.Option(
        Color.auto, "--color", case_sensitive=False, help="Colour codes: auto (on a terminal, unless NO_COLOR is set), always, never."
    ),
) -> None:
    """Submit GPU jobs to rai and follow them live."""
    set_color(color.value)


@app.command()
def submit(
    path: Path = typer.Option(Path("."), "-p", "--path", help="project folder holding rai_build.yml"),
    queue: str | None = typer.Option(None, "--queue", "-q", help="queue to run on (default: the server's)"),
    kind: str = typer.Option("dev", "--kind", help="submission kind, e.g. m1, m2, m3, final"),
    detach: bool = typer.Option(False, "--detach", "-d", help="queue the job and return at once"),
    server: str | None = SERVER_OPT,
) -> None:
    """Upload a project folder and run its rai_build.yml on a GPU worker."""
    from .submit import run

    raise typer.Exit(run(path, queue, kind, detach, server))


@app.command()
def logs(
    job_id: str | None = typer.Argument(None, help="the job (default: your last one)"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep following until the job ends"),
    after: int = typer.Option(0, "--after", min=0, help="start after this line (resume where a client stopped)"),
    server: str | None = SERVER_OPT,
) -> None:
    """Print a job's log (whole, or live with --follow)."""
    from .follow import show_log

    raise typer.Exit(show_log(job_id, follow, after, server))


@app.command()
def status(job_id: str, as_json: bool = JSON_OPT, server: str | None = SERVER_OPT) -> None:
    """Show one job's state; the exit status is the job's, as with submit."""
    if as_json:
        raise typer.Exit(listings.run(Listing("status", server, job=job_id)))
    with connected(server) as api:
        job = api.job(job_id)
    code = exit_code_for(job.state, job.exit_code) if job.state.finished else ExitCode.OK
    table = Table(show_header=False, box=None, padding=(0, 2))
    for key in (
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
    ):
        value = getattr(job, key)
        if value is not None:
            shown = value.value if isinstance(value, JobState) else local(value) if key.endswith("_at") else value
            table.add_row(key.removesuffix("_at"), Text(cell(shown)))
    if job.position is not None and job.eta_seconds is not None:  # issue 37: the ETA and why later jobs go first
        table.add_row("eta", Text(f"starts in about {job.eta_seconds:.0f} s"))
    if job.position_why:
        table.add_row("why", Text(cell(job.position_why)))
    show(table)
    if len(job.phases) > 1:
        timeline = Table("+ s", "step", "detail", title="Timeline", box=None, padding=(0, 2), title_justify="left")
        t0 = job.phases[0].at
        for ph in job.phases:
            timeline.add_row(f"{(ph.at - t0).total_seconds():8.3f}", Text(cell(ph.name)), Text(cell(ph.detail or "")))
        show(timeline)
    print_results(job.results.model_dump() if job.results else None)
    raise typer.Exit(code)


@app.command()
def queue(as_json: bool = JSON_OPT, server: str | None = SERVER_OPT) -> None:
    """Jobs waiting and running per queue, the workers serving it, and where your jobs stand."""
    if as_json:
        raise typer.Exit(listings.run(Listing("queue", server)))
    with connected(server) as api:
        queues = api.queues()
    if not queues:
        say("No queue has jobs or live workers.")
        return
    show(
        fit(
            ("queue", "waiting", "running", "workers", "slots"),
            [(Text(cell(q.queue)), str(q.waiting), str(q.running), str(q.workers), str(q.slots)) for q in queues],
        )
    )
    for q in queues:
        if q.unanswered:
            say(
                f"'{q.queue}': {q.unanswered} running job(s) on a worker that stopped answering (nothing runs there); "
                f"they go back in the queue within {q.dead_after:.0f} s of its last heartbeat"
            )
        for j in q.mine:
            if j.waiting:
                where = j.waiting
            elif j.state is JobState.queued:
                where = f"position {j.position} of {q.waiting}" + (f", about {j.eta_seconds:.0f} s" if j.eta_seconds else "")
            else:
                where = f"running on {j.worker}"
            say(f"Your job {j.id} on '{q.queue}': {where}")


@app.command()
def images(as_json: bool = JSON_OPT, server: str | None = SERVER_OPT) -> None:
    """The images each queue can run (those its live workers hold)."""
    if as_json:
        raise typer.Exit(listings.run(Listing("images", server)))
    with connected(server) as api:
        queues = api.images()
    if not queues:
        say("No live worker: jobs wait until one comes, and any image may be named meanwhile.")
        return
    for q in queues:
        rows: list[tuple[Text | str, Text | str]] = [(Text("(any: some workers run jobs without containers)"), "")] if q.any_image else []
        rows += [(Text(cell(offer.image)), f"{offer.workers}/{q.workers}") for offer in q.images]
        rows += [(Text(cell(image)), Text(cell(what))) for image, what in q.pulling.items()]
        show(fit(("image", "workers"), rows, title=f"queue '{q.queue}' ({q.workers} live worker(s))", title_justify="left"))


@app.command()
def history(limit: int = typer.Option(20, "-n", help="how many jobs"), as_json: bool = JSON_OPT, server: str | None = SERVER_OPT) -> None:
    """Your recent jobs, newest first."""
    if as_json:
        raise typer.Exit(listings.run(Listing("history", server, limit=limit)))
    with connected(server) as api:
        jobs = api.jobs(limit).jobs
    # ids are copied from here: whole at any width (a narrow terminal loses 'took', then 'kind', …)
    queues = len({job.queue for job in jobs}) > 1
    columns = ("job", "state", "kind", *(["queue"] if queues else []), "submitted", "took", "op time")
    rows = []
    for job in jobs:
        took = f"{job.duration:.1f} s" if job.duration is not None else ""
        op = f"{job.results.op_time_total:g}" if job.results and job.results.op_time_total is not None else ""
        rows.append(
            [
                Text(cell(job.id)),
                job.state.value,
                Text(cell(job.kind)),
                *([Text(cell(job.queue))] if queues else []),
                local(job.created_at, seconds=False, year=False),
                took,
                op,
            ]
        )
    show(fit(columns, rows, drop=("took", "queue", "kind", "submitted"), box=None, padding=(0, 1), pad_edge=False, header_style="bold"))


@app.command()
def download(
    job_id: str,
    output: Path | None = typer.Option(None, "-o", "--output", help="file to write (default: build-JOB.tar.gz)"),
    server: str | None = SERVER_OPT,
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
def ranking(
    n: int | None = typer.Option(None, "-n", help="show the top N"), as_json: bool = JSON_OPT, server: str | None = SERVER_OPT
) -> None:
    """The leaderboard: each team's fastest valid run (yours is marked -->)."""
    if as_json:
        raise typer.Exit(listings.run(Listing("ranking", server, limit=n)))
    with connected(server) as api:
        entries = api.leaderboard(n)
        unverified = [] if entries else api.leaderboard(None, board="unverified")
    rows = []
    for e in entries:
        name = Text(f"{cell(e.name)} -->", "bold") if e.mine else Text(cell(e.name))
        op = f"{e.op_time:.6f}" + (f" ± {e.spread / 2:.6f}" if e.spread is not None else "")
        rows.append(
            (str(e.rank), name, op, f"{e.correctness:g}", local(e.when, seconds=False), Text(cell(e.gpu or "")), "✓" if e.verified else "")
        )
    if entries:  # op times whole at any width: a narrow terminal loses 'verified', then 'gpu', …
        show(
            fit(
                ("#", "team", "op time (s)", "correctness", "when", "gpu", "verified"),
                rows,
                drop=("verified", "gpu", "when", "correctness"),
                box=None,
                padding=(0, 1),
                pad_edge=False,
                header_style="bold",
            )
        )
        return
    say(
        "No run ranks yet. Only runs the service measures rank: the kind the course grades (e.g. --kind final), "
        "built with the course's own build file, timed by the service itself with the GPU to itself and its answers "
        "checked on the server, so a printed Op Time or Correctness alone cannot rank"
        + (f". {len(unverified)} run(s) of other kinds are on the unverified board (web: Leaderboard, 'unverified')" if unverified else "")
    )


@app.command()
def kinds(server: str | None = SERVER_OPT) -> None:
    """What you can submit: each kind's opening and your own deadline, and the limits you have left."""
    from .term import print_kinds, print_limits

    with connected(server) as api:
        view = api.kinds()
    print_kinds(view.kinds, view.limits.exempt)
    print_limits(view.limits)


@app.command()
def limits(server: str | None = SERVER_OPT) -> None:
    """Your limits now: jobs active, submissions and GPU minutes left, late days left."""
    from .term import print_limits

    with connected(server) as api:
        print_limits(api.limits())


@app.command()
def cancel(job_id: str, server: str | None = SERVER_OPT) -> None:
    """Cancel a queued or running job."""
    with connected(server) as api:
        job = api.cancel(job_id)
    say(f"Job {job.id}: {job.state.value}" + (" (stopping)" if not job.state.finished else ""))


@app.command()
def delete(job_ids: list[str] = typer.Argument(..., help="finished jobs"), server: str | None = SERVER_OPT) -> None:
    """Free storage: delete finished jobs' archives and build folders (their logs and results stay)."""
    with connected(server) as api:
        for job_id in job_ids:
            freed = api.delete_files(job_id)
            quota = f" of your {kib(freed.quota_bytes)}" if freed.quota_bytes else ""
            say(f"Job {freed.job_id}: freed {kib(freed.freed_bytes)}; you store {kib(freed.stored_bytes)}{quota}")


@app.command()
def regrade(
    job_id: str,
    message: str = typer.Argument(..., help="what staff should look at again (up to 2000 characters)"),
    server: str | None = SERVER_OPT,
) -> None:
    """Ask staff for a regrade of a run that has ended, saying why (one open request per run)."""
    with connected(server) as api:
        r = api.ask_regrade(job_id, message)
    say(f"Regrade request #{r.id} for job {r.job_id} sent; 'raiclient regrades' shows its answer")


@app.command()
def regrades(server: str | None = SERVER_OPT) -> None:
    """Your regrade requests and what became of them, newest first."""
    from .regrades import show

    with connected(server) as api:
        rows = api.my_regrades()
    if not rows:
        say('You have asked for no regrade; ask with: raiclient regrade JOB_ID "why"')
        return
    show(rows)


@app.command()
def login(
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER", help="the rai server's URL"),
    access_key: str | None = typer.Option(None, "--access-key", help="from your instructor"),
    secret_key: str | None = typer.Option(None, "--secret-key", help="from your instructor"),
) -> None:
    """Check credentials with the server and write them to ~/.rai_profile."""
    import sys

    from raiprotocol.profile import server_url

    known = _known_server()
    if None in (server or known, access_key, secret_key) and not sys.stdin.isatty():
        missing = [
            flag for flag, value in (("--server", server or known), ("--access-key", access_key), ("--secret-key", secret_key)) if not value
        ]
        fail(
            f"no terminal to ask on: give {', '.join(missing)} (e.g. raiclient login --server https://rai.example.edu "
            "--access-key KEY --secret-key SECRET)"
        )
    if not server:
        server = typer.prompt("Server", default=known)
    access_key = access_key or typer.prompt("Access key")
    secret_key = secret_key or typer.prompt("Secret key", hide_input=True)
    try:
        profile = Profile(access_key=access_key.strip(), secret_key=secret_key.strip(), server=server_url(server or ""))
    except ProfileError as exc:
        fail(str(exc))
        raise
    api = Api(profile)
    try:
        me = api.me()
    except ApiError as exc:
        if exc.status == 401:  # not "run raiclient login": this is it
            fail(
                f"the server at {profile.server} did not accept these keys; check them (copy them whole) or ask your "
                "instructor for new ones",
                exc.code,
            )
        fail(str(exc), exc.code)
    finally:
        api.close()
    profile = profile.with_(username=me.username, email=me.email, team=me.team, firstname=me.firstname, lastname=me.lastname)
    path = write_profile(profile)
    say(f"Logged in as {me.username} ({me.role}); profile written to {path}")


def _known_server() -> str | None:
    """The server the profile already names, offered as the prompt's default."""
    try:
        return load_profile(None).server
    except ProfileError:
        return None


@app.command()
def version(as_json: bool = JSON_OPT, server: str | None = SERVER_OPT) -> None:
    """Print the client's version (and the server's, when a profile names one that answers)."""
    if as_json:
        asked, server_ver = server_info(server)
        print_json(VersionOut(client=__version__, server=asked, server_version=server_ver), VersionOut)
        return
    print(f"raiclient {__version__}")
    line = server_version(server)
    if line:
        print(line)


def main(args: list[str] | None = None) -> None:
    """The full command line (``entry.main`` answers --help and version without it)."""
    from .admin import admin

    app.add_typer(admin, name="admin")
    app(args=args, prog_name="raiclient")


if __name__ == "__main__":
    main()
