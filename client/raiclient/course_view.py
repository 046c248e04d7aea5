"""The course as a student sees it in the terminal, on the standard library (``raiclient.pyz``
runs them on a bare Python): ``queue``, ``images``, ``ranking``, ``kinds``, ``limits``,
``regrade`` and ``regrades``."""

from __future__ import annotations

import argparse

from raiprotocol.states import ExitCode

from . import listings, table
from .output import cell, local, say, waits
from .session import session, when


def queue(args: argparse.Namespace) -> int:
    """Jobs waiting and running per queue, the workers serving it, and where your jobs stand."""
    if args.as_json:
        return listings.run(listings.Listing("queue", args.server))
    with session(args.server) as conn:
        queues = conn.json("GET", "/api/v1/queue")
    if not queues:
        say("No queue has jobs or live workers.")
        return ExitCode.OK
    rows = [(cell(q["queue"]), str(q["waiting"]), str(q["running"]), str(q["workers"]), str(q["slots"])) for q in queues]
    table.show(("queue", "waiting", "running", "workers", "slots"), rows, box=True)
    for q in queues:
        if q.get("unanswered"):
            say(
                f"'{q['queue']}': {q['unanswered']} running job(s) on a worker that stopped answering (nothing runs there); "
                f"they go back in the queue within {q.get('dead_after', 0):.0f} s of its last heartbeat"
            )
        for j in q.get("mine") or []:
            if j.get("waiting"):
                where = j["waiting"]
            elif j["state"] == "queued":
                said = waits(j)
                where = f"position {j.get('position')} of {q['waiting']}" + (f", {said}" if said else "")
            else:
                where = f"running on {j.get('worker')}"
            say(f"Your job {j['id']} on '{q['queue']}': {where}")
    return ExitCode.OK


def images(args: argparse.Namespace) -> int:
    """The images each queue can run (those its live workers hold)."""
    if args.as_json:
        return listings.run(listings.Listing("images", args.server))
    with session(args.server) as conn:
        queues = conn.json("GET", "/api/v1/images")
    if not queues:
        say("No live worker: jobs wait until one comes, and any image may be named meanwhile.")
        return ExitCode.OK
    for q in queues:
        rows = [("(any: some workers run jobs without containers)", "")] if q.get("any_image") else []
        rows += [(cell(offer["image"]), f"{offer['workers']}/{q['workers']}") for offer in q.get("images") or []]
        rows += [(cell(image), cell(what)) for image, what in (q.get("pulling") or {}).items()]
        table.show(("image", "workers"), rows, box=True, title=f"queue '{cell(q['queue'])}' ({q['workers']} live worker(s))")
    return ExitCode.OK


def ranking(args: argparse.Namespace) -> int:
    """The leaderboard: op times whole at any width (a narrow terminal loses 'verified', then 'gpu', …)."""
    if args.as_json:
        return listings.run(listings.Listing("ranking", args.server, limit=args.limit))
    with session(args.server) as conn:
        entries = conn.json("GET", "/api/v1/leaderboard", params={"n": args.limit} if args.limit else None)
        unverified = [] if entries else conn.json("GET", "/api/v1/leaderboard", params={"board": "unverified"})
    if entries:
        rows = []
        for e in entries:
            op = f"{e['op_time']:.6f}" + (f" ± {e['spread'] / 2:.6f}" if e.get("spread") is not None else "")
            name = f"{cell(e['name'])} -->" if e.get("mine") else cell(e["name"])
            when_ = local(when(e["when"]), seconds=False)
            rows.append(
                (str(e["rank"]), name, op, f"{e['correctness']:g}", when_, cell(e.get("gpu") or ""), "✓" if e.get("verified") else "")
            )
        columns = ("#", "team", "op time (s)", "correctness", "when", "gpu", "verified")
        table.show(columns, rows, drop=("verified", "gpu", "when", "correctness"))
        return ExitCode.OK
    say(
        "No run ranks yet. Only runs the service measures rank: the kind the course grades (e.g. --kind final), "
        "built with the course's own build file, timed by the service itself with the GPU to itself and its answers "
        "checked on the server, so a printed Op Time or Correctness alone cannot rank"
        + (f". {len(unverified)} run(s) of other kinds are on the unverified board (web: Leaderboard, 'unverified')" if unverified else "")
    )
    return ExitCode.OK


def kinds(args: argparse.Namespace) -> int:
    """What you can submit: each kind's opening and your own deadline, and the limits you have left."""
    from .term import print_kinds, print_limits

    with session(args.server) as conn:
        view = conn.json("GET", "/api/v1/kinds")
    print_kinds(view["kinds"], view["limits"].get("exempt", False))
    print_limits(view["limits"])
    return ExitCode.OK


def limits(args: argparse.Namespace) -> int:
    from .term import print_limits

    with session(args.server) as conn:
        print_limits(conn.json("GET", "/api/v1/limits"))
    return ExitCode.OK


def regrade(args: argparse.Namespace) -> int:
    """Ask staff to look at a run again, saying why."""
    with session(args.server) as conn:
        r = conn.json("POST", f"/api/v1/jobs/{args.job_id}/regrade", json_body={"message": args.message})
    say(f"Regrade request #{r['id']} for job {r['job_id']} sent; 'raiclient regrades' shows its answer")
    return ExitCode.OK


def regrades(args: argparse.Namespace) -> int:
    from .regrades import show

    with session(args.server) as conn:
        rows = conn.json("GET", "/api/v1/regrades")
    if not rows:
        say('You have asked for no regrade; ask with: raiclient regrade JOB_ID "why"')
        return ExitCode.OK
    show(rows)
    return ExitCode.OK
