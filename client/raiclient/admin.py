"""``raiclient admin …``: roster import, key rotation and revocation, the audit log (staff)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.text import Text

from raiprotocol.models import AuditRow, CourseBuildOut, IssuedKeys
from raiprotocol.profile import Profile, write_profile

from . import console as cli
from . import issued as issued_profiles
from .admin_kinds import kinds
from .output import cell, local

admin = typer.Typer(no_args_is_help=True, help="Course management (instructors and admins).", rich_markup_mode=None)
roster = typer.Typer(no_args_is_help=True, help="The class list.", rich_markup_mode=None)
keys = typer.Typer(no_args_is_help=True, help="Students' credentials.", rich_markup_mode=None)
images = typer.Typer(no_args_is_help=True, help="Images on the workers.", rich_markup_mode=None)
course = typer.Typer(no_args_is_help=True, help="The course's build files for ranked kinds.", rich_markup_mode=None)
admin.add_typer(roster, name="roster")
admin.add_typer(keys, name="keys")
admin.add_typer(images, name="images")
admin.add_typer(course, name="course")
admin.add_typer(kinds, name="kinds")


def _profile(issued: IssuedKeys, server: str) -> Profile:
    return Profile(server=server, **issued.model_dump())


@roster.command("import")
def roster_import(
    csv_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="CSV: username, name, email, team (and optionally role)"),
    out: Path = typer.Option(Path("profiles"), "--out", help="folder for one ready-to-use .rai_profile per new student"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Create the students of a roster and write their profiles; re-importing changes only what changed."""
    with cli.connected(server) as api:
        result = api.import_roster(csv_file.read_text(encoding="utf-8-sig"))
    out.mkdir(parents=True, exist_ok=True)
    written = {
        issued.username: write_profile(_profile(issued, api.server), out / f"{issued.username}.rai_profile") for issued in result.created
    }
    issued_profiles.remember(written)
    cli.say(
        f"{len(result.created)} created (profiles in {out}/), {len(result.updated)} updated, "
        f"{len(result.unchanged)} unchanged, {len(result.reactivated)} reactivated, {len(result.deactivated)} deactivated"
    )
    if result.deactivated:
        cli.say("deactivated (not in the roster; history kept): " + ", ".join(result.deactivated))


@keys.command("rotate")
def keys_rotate(
    username: str,
    out: Path | None = typer.Option(
        None,
        "--out",
        help="write the new profile here (default: where this client "
        "wrote USER's profile before, else profiles/USER.rai_profile "
        "if it exists, else ./USER.rai_profile)",
    ),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Issue new keys; the old ones stop working at once."""
    dest, why = (out, "as asked") if out else issued_profiles.where(username)
    with cli.connected(server) as api:
        issued = api.rotate_keys(username)
    path = write_profile(_profile(issued, api.server), dest)
    issued_profiles.remember({username: path})
    cli.say(f"new keys for {username}: profile written to {path.resolve()} ({why}); the old access key no longer works")


@keys.command("revoke")
def keys_revoke(username: str, server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER")) -> None:
    """Stop a user's key from working (rotate later to give them a new one)."""
    with cli.connected(server) as api:
        api.revoke_keys(username)
    cli.say(f"{username}'s key is revoked")


@admin.command("remeasure")
def remeasure(
    job_id: str,
    repeats: int = typer.Option(10, "--repeats", min=2, max=20, help="timed runs (the course file's count by default is 5)"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Measure a ranked entry again: the same files and course build, more timed runs on an idle GPU;
    its result replaces the entry's on the board once it ends (staff; audited)."""
    with cli.connected(server) as api:
        job = api.remeasure(job_id, repeats)
    cli.say(f"job {job.id} measures {job_id} again ({repeats} timed runs); follow it with: raiclient logs {job.id} --follow")


@admin.command("grades")
def grades(
    kind: str = typer.Argument(..., help="the kind whose grades, by its rule (raiclient admin kinds set KIND --grade …)"),
    fmt: str = typer.Option("csv", "--format", help="csv: every figure behind each grade; canvas: Canvas's gradebook import"),
    assignment: str | None = typer.Option(None, "--assignment", help="canvas: the assignment's column, e.g. 'Final Project (123456)'"),
    output: Path | None = typer.Option(None, "-o", "--output", help="write here (default: print)"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """One row per student on the roster: the run that counts, its figures, the grade, or 0 and why."""
    if fmt not in ("csv", "canvas"):
        cli.fail(f"--format: {fmt!r} is not csv or canvas")
    with cli.connected(server) as api:
        text = api.grades(kind, fmt, assignment)
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    cli.say(f"{len(text.splitlines()) - (2 if fmt == 'canvas' else 1)} students' grades for '{kind}' written to {output}")


@admin.command("regrades")
def regrades(
    everything: bool = typer.Option(False, "--all", help="the answered requests too, newest first"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """The open regrade requests, oldest first (staff): answer each with 'raiclient admin regrade ID'."""
    from .regrades import show

    with cli.connected(server) as api:
        rows = api.regrades(everything)
    if not rows:
        cli.say("No open regrade request" if not everything else "No regrade request yet")
        return
    show(rows, staff=True)


@admin.command("regrade")
def regrade(
    request_id: int = typer.Argument(..., help="the request's number (#ID in 'raiclient admin regrades')"),
    measure_again: bool = typer.Option(False, "--remeasure", help="measure the run again (ranked runs)"),
    repeats: int = typer.Option(10, "--repeats", min=2, max=20, help="timed runs of the re-measure"),
    grade: str | None = typer.Option(None, "--grade", help="the adjusted grade (with --reason)"),
    reason: str = typer.Option("", "--reason", help="why the grade changes (the student reads it)"),
    answer: str = typer.Option("", "--answer", help="what the student reads; alone, it closes the request"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Answer a regrade request (staff; audited): --remeasure, --grade G --reason WHY, or --answer TEXT alone."""
    from raiprotocol.models import RegradeAction

    from .regrades import outcome

    if measure_again and grade is not None:
        cli.fail("give either --remeasure or --grade, not both")
    action = "remeasure" if measure_again else "adjust" if grade is not None else "close"
    with cli.connected(server) as api:
        r = api.answer_regrade(
            request_id, RegradeAction.model_construct(action=action, answer=answer, grade=grade or "", reason=reason, repeats=repeats)
        )
    cli.say(f"Regrade request #{r.id} ({r.student}, job {r.job_id}) closed: {outcome(r)}")


@admin.command("similarity")
def similarity(
    kind: str = typer.Argument(..., help="the kind whose teams' latest submissions are compared, e.g. final"),
    starter: Path | None = typer.Option(
        None, "--starter", exists=True, dir_okay=False, help="the course's starter code (e.g. new-forward.cu): never counts as a match"
    ),
    show: int = typer.Option(10, "-n", min=0, max=50, help="how many of the most similar pairs to print"),
    detach: bool = typer.Option(False, "--detach", "-d", help="start it and return at once"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Compare each team's latest submission of KIND, pair by pair (staff; made in the background):
    prints the progress, then the most similar pairs and the page that shows them side by side."""
    from .similarity import follow

    text = starter.read_text(encoding="utf-8", errors="replace") if starter else ""
    with cli.connected(server) as api:
        report = api.start_similarity(kind, text)
        page = f"{api.server}/similarity/{report.id}"
        cli.say(f"Similarity report #{report.id} for '{report.kind}' started ({', '.join(report.files)}); its page: {page}")
        if not detach:
            follow(api, report.id, show)


@admin.command("audit")
def audit(
    limit: int = typer.Option(50, "-n"),
    as_json: bool = cli.JSON_OPT,
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Recent staff actions."""
    with cli.connected(server) as api:
        rows = api.audit(limit)
    if as_json:
        cli.print_json(rows, list[AuditRow])
        return
    cli.show(
        cli.fit(
            ("when", "who", "action", "target", "detail"),
            [(local(r.at), *(Text(cell(v)) for v in (r.actor, r.action, r.target, r.detail or ""))) for r in rows],
        )
    )


@images.command("pull")
def images_pull(image: str, server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER")) -> None:
    """Have every worker pull IMAGE from its registry (on the worker host; jobs have no network)."""
    with cli.connected(server) as api:
        req = api.pull_image(image)
    cli.say(f"Asked every worker to pull {req.image}; 'raiclient images' shows when each has it")


@images.command("load")
def images_load(
    tar: Path = typer.Argument(..., exists=True, dir_okay=False, help="a `docker save NAME:TAG -o FILE.tar` archive"),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Upload a saved image; every worker downloads it from the server and loads it (no registry needed)."""
    with cli.connected(server) as api:
        reqs = api.load_image(tar)
    names = ", ".join(r.image for r in reqs)
    cli.say(f"Uploaded {tar.name} ({names}); every worker loads it now; 'raiclient images' shows when each has it")


@course.command("install")
def course_install(
    kind: str = typer.Argument(..., help="the ranked kind, e.g. final"),
    build_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="the course's build file, with its 'ranked:' section"),
    labels: Path | None = typer.Option(
        None, "--labels", exists=True, dir_okay=False, help="unused since issue 46: the course's reference computes the answers"
    ),
    server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER"),
) -> None:
    """Install a new version of KIND's build file: from now on KIND's submissions run it, and only
    their runs, timed and checked by the service, rank."""
    with cli.connected(server) as api:
        out = api.install_course_build(kind, build_file.read_text(), labels.read_text() if labels else "")
    cli.say(
        f"'{out.kind}' now runs the course's build file version {out.version} (image {out.image}): "
        f"students supply {', '.join(out.student_files)}; the service times each operation of '{out.timed}' "
        f"{out.repeats} times on inputs drawn for each run and checks its outputs against '{out.reference}'"
    )


@course.command("show")
def course_show(as_json: bool = cli.JSON_OPT, server: str | None = typer.Option(None, "--server", envvar="RAI_SERVER")) -> None:
    """The build file each ranked kind runs now."""
    with cli.connected(server) as api:
        rows = api.course_builds()
    if as_json:
        cli.print_json(rows, list[CourseBuildOut])
        return
    if not rows:
        cli.say("No course build file is installed: no run ranks yet ('raiclient admin course install')")
        return
    for r in rows:  # a few lines each: a table of ten columns does not fit a terminal
        cli.show(
            Text(
                f"{r.kind}: version {r.version}, installed {local(r.installed_at, seconds=False)} by {r.installed_by}, "
                f"image {r.image}\n  students supply: {', '.join(r.student_files)}\n"
                f"  timed: {r.timed} ({r.measure}, {r.repeats} runs, the median ranks)\n"
                f"  checked against: {r.reference} (relative tolerance {r.rtol if r.rtol is not None else '?'})"
            )
        )
