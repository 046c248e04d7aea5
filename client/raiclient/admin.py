"""``raiclient admin …``: roster import, key rotation and revocation, re-measures, grades, regrade
answers, similarity, the audit log, images and the course's build files (staff). Each function
runs one command as ``commands_admin.py`` defines it; they need pydantic (the full client)."""

from __future__ import annotations

import argparse
import sys

from raiprotocol.models import AuditRow, CourseBuildOut, IssuedKeys
from raiprotocol.profile import Profile, write_profile

from . import issued as issued_profiles
from . import staff as cli
from . import table
from .output import cell, local, say
from .session import fail


def _profile(issued: IssuedKeys, server: str) -> Profile:
    return Profile(server=server, **issued.model_dump())


def roster_import(args: argparse.Namespace) -> int:
    """Create the students of a roster and write their profiles; re-importing changes only what changed."""
    with cli.connected(args.server) as api:
        result = api.import_roster(args.csv_file.read_text(encoding="utf-8-sig"))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    written = {
        issued.username: write_profile(_profile(issued, api.server), out / f"{issued.username}.rai_profile") for issued in result.created
    }
    issued_profiles.remember(written)
    say(
        f"{len(result.created)} created (profiles in {out}/), {len(result.updated)} updated, "
        f"{len(result.unchanged)} unchanged, {len(result.reactivated)} reactivated, {len(result.deactivated)} deactivated"
    )
    if result.deactivated:
        say("deactivated (not in the roster; history kept): " + ", ".join(result.deactivated))
    return 0


def keys_rotate(args: argparse.Namespace) -> int:
    """Issue new keys; the old ones stop working at once."""
    username = args.username
    dest, why = (args.out, "as asked") if args.out else issued_profiles.where(username)
    with cli.connected(args.server) as api:
        issued = api.rotate_keys(username)
    path = write_profile(_profile(issued, api.server), dest)
    issued_profiles.remember({username: path})
    say(f"new keys for {username}: profile written to {path.resolve()} ({why}); the old access key no longer works")
    return 0


def keys_revoke(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        api.revoke_keys(args.username)
    say(f"{args.username}'s key is revoked")
    return 0


def remeasure(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        job = api.remeasure(args.job_id, args.repeats)
    say(f"job {job.id} measures {args.job_id} again ({args.repeats} timed runs); follow it with: raiclient logs {job.id} --follow")
    return 0


def rerun(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        job = api.rerun(args.job_id)
    say(f"job {job.id} runs {job.owner}'s job {args.job_id} again ('{job.kind}'); follow it with: raiclient logs {job.id} --follow")
    return 0


def grades(args: argparse.Namespace) -> int:
    """One row per student on the roster: the run that counts, its figures, the grade, or 0 and why."""
    with cli.connected(args.server) as api:
        text = api.grades(args.kind, args.fmt, args.assignment)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    args.output.write_text(text, encoding="utf-8")
    say(f"{len(text.splitlines()) - (2 if args.fmt == 'canvas' else 1)} students' grades for '{args.kind}' written to {args.output}")
    return 0


def regrades(args: argparse.Namespace) -> int:
    from .regrades import show

    with cli.connected(args.server) as api:
        rows = api.regrades(args.everything)
    if not rows:
        say("No open regrade request" if not args.everything else "No regrade request yet")
        return 0
    show([r.model_dump(mode="json") for r in rows], staff=True)
    return 0


def regrade(args: argparse.Namespace) -> int:
    """Answer a regrade request: --remeasure, --grade G --reason WHY, or --answer TEXT alone."""
    from raiprotocol.models import RegradeAction

    from .regrades import outcome

    if args.measure_again and args.grade is not None:
        fail("give either --remeasure or --grade, not both")
    action = "remeasure" if args.measure_again else "adjust" if args.grade is not None else "close"
    body = RegradeAction.model_construct(
        action=action, answer=args.answer, grade=args.grade or "", reason=args.reason, repeats=args.repeats
    )
    with cli.connected(args.server) as api:
        r = api.answer_regrade(args.request_id, body)
    say(f"Regrade request #{r.id} ({r.student}, job {r.job_id}) closed: {outcome(r.model_dump(mode='json'))}")
    return 0


def similarity(args: argparse.Namespace) -> int:
    """Compare each team's latest submission of KIND; follow it unless --detach."""
    from .similarity import follow

    text = args.starter.read_text(encoding="utf-8", errors="replace") if args.starter else ""
    with cli.connected(args.server) as api:
        report = api.start_similarity(args.kind, text)
        page = f"{api.server}/similarity/{report.id}"
        say(f"Similarity report #{report.id} for '{report.kind}' started ({', '.join(report.files)}); its page: {page}")
        if not args.detach:
            follow(api, report.id, args.show)
    return 0


def audit(args: argparse.Namespace) -> int:
    """Recent staff actions, one line each at any width (issue 49: a boxed table folded the details
    one word a line); ``--action`` and ``--actor`` are asked of the server."""
    with cli.connected(args.server) as api:
        rows = api.audit(args.limit, args.action, args.actor)
    if args.as_json:
        cli.print_json(rows, list[AuditRow])
        return 0
    if not rows:
        said = " and ".join(w for w in (args.action and f"action {args.action}", args.actor and f"by {args.actor}") if w)
        say("No staff action in the audit log" + (f" ({said})" if said else ""))
        return 0
    sys.stdout.write(audit_lines(rows, table.width()))
    return 0


def detail_words(detail: dict[str, object] | None) -> str:
    """An entry's detail as ``key=value, …`` (empty values left out; lists joined with '+')."""
    parts = []
    for key, value in (detail or {}).items():
        if value in (None, "", [], {}):
            continue
        text = "+".join(str(v) for v in value) if isinstance(value, list) else str(value)
        parts.append(f"{key}={text}")
    return cell(", ".join(parts))


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def audit_lines(rows: list[AuditRow], columns: int) -> str:
    """A header, then an entry a line: when (local, to the minute), who, action, target, and as
    much of the detail as the line has room for (``--json`` has all of it). Where fewer than 40
    columns are left for the detail, each entry's detail goes on the line under it, indented."""
    when = [local(r.at, seconds=False) for r in rows]
    cols = [
        ("when", when, 16),
        ("who", [cell(r.actor) for r in rows], 12),
        ("action", [cell(r.action) for r in rows], 18),
        ("target", [cell(r.target) for r in rows], 26),
    ]
    widths = [min(max(len(name), *(len(v) for v in values)), cap) for name, values, cap in cols]
    lead = sum(widths) + 2 * len(widths)
    room = columns - lead
    below = room < 40
    details = [detail_words(r.detail) for r in rows]

    def line(values: list[str], detail: str) -> str:
        head = "  ".join(_cut(v, w).ljust(w) for v, w in zip(values, widths, strict=True))
        return (head if below else f"{head}  {_cut(detail, room)}").rstrip()

    out = [line([name for name, _, _ in cols], "" if below else "detail")]
    for i, _ in enumerate(rows):
        out.append(line([values[i] for _, values, _ in cols], details[i]))
        if below and details[i]:
            out.append("    " + _cut(details[i], columns - 4))
    return "\n".join(out) + "\n"


def images_pull(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        req = api.pull_image(args.image)
    say(f"Asked every worker to pull {req.image}; 'raiclient images' shows when each has it")
    return 0


def images_load(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        reqs = api.load_image(args.tar)
    names = ", ".join(r.image for r in reqs)
    say(f"Uploaded {args.tar.name} ({names}); every worker loads it now; 'raiclient images' shows when each has it")
    return 0


def course_install(args: argparse.Namespace) -> int:
    with cli.connected(args.server) as api:
        out = api.install_course_build(args.kind, args.build_file.read_text(), args.labels.read_text() if args.labels else "")
    say(
        f"'{out.kind}' now runs the course's build file version {out.version} (image {out.image}): "
        f"students supply {', '.join(out.student_files)}; the service times each operation of '{out.timed}' "
        f"{out.repeats} times on inputs drawn for each run and checks its outputs against '{out.reference}'"
    )
    return 0


def course_show(args: argparse.Namespace) -> int:
    """The build file each ranked kind runs now: a few lines each (ten columns do not fit a terminal)."""
    with cli.connected(args.server) as api:
        rows = api.course_builds()
    if args.as_json:
        cli.print_json(rows, list[CourseBuildOut])
        return 0
    if not rows:
        say("No course build file is installed: no run ranks yet ('raiclient admin course install')")
        return 0
    for r in rows:
        sys.stdout.write(
            f"{r.kind}: version {r.version}, installed {local(r.installed_at, seconds=False)} by {r.installed_by}, "
            f"image {r.image}\n  students supply: {', '.join(r.student_files)}\n"
            f"  timed: {r.timed} ({r.measure}, {r.repeats} runs{f' of {r.passes} passes' if r.passes > 1 else ''}, "
            f"the median {'pass ' if r.passes > 1 else ''}ranks)\n"
            f"  checked against: {r.reference} (relative tolerance {r.rtol if r.rtol is not None else '?'})\n"
        )
    return 0
