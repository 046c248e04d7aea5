"""``raiclient admin …`` in the one command-line definition (``commands.py``): the staff commands,
each run by ``admin.py`` or ``admin_kinds.py``. They need pydantic (``commands.EXTRAS``); the
one-file client says how to install the full client when one is asked for."""

from __future__ import annotations

import argparse
from pathlib import Path

from raiprotocol import graderules

from .argtree import Tree, arg, as_json, count, existing_file, server

A = "raiclient.admin:"
K = "raiclient.admin_kinds:"


def build(t: Tree, admin: argparse.ArgumentParser) -> None:
    roster = t.group(admin, "roster", "The class list.")
    p = t.command(
        roster,
        "import",
        A + "roster_import",
        "Create the students of a roster and write their profiles; re-importing changes only what changed.",
        admin=True,
    )
    arg(p, "csv_file", type=existing_file, metavar="CSV", help="CSV: username, name, email, team (and optionally role)")
    arg(p, "--out", type=Path, default=Path("profiles"), metavar="DIR", help="folder for one ready-to-use .rai_profile per new student")
    server(p)

    keys = t.group(admin, "keys", "Students' credentials.")
    p = t.command(keys, "rotate", A + "keys_rotate", "Issue new keys; the old ones stop working at once.", admin=True)
    arg(p, "username", metavar="USER")
    arg(
        p,
        "--out",
        type=Path,
        metavar="FILE",
        help="write the new profile here (default: where this client wrote USER's profile before, else "
        "profiles/USER.rai_profile if it exists, else ./USER.rai_profile)",
    )
    server(p)
    p = t.command(keys, "revoke", A + "keys_revoke", "Stop a user's key from working (rotate later to give them a new one).", admin=True)
    arg(p, "username", metavar="USER")
    server(p)

    p = t.command(
        admin,
        "remeasure",
        A + "remeasure",
        "Measure a ranked entry again: the same files and course build, more timed runs on an idle GPU;",
        "its result replaces the entry's on the board once it ends (staff; audited).",
        admin=True,
    )
    arg(p, "job_id", metavar="JOB", complete="jobs")
    arg(p, "--repeats", type=count(2, 20), default=10, metavar="N", help="timed runs (the course file's count by default is 5)")
    server(p)

    p = t.command(
        admin,
        "rerun",
        A + "rerun",
        "Run an ended job again: a new job of the same owner and kind from the same project archive",
        "and build file, keeping its submission time (staff; audited).",
        admin=True,
    )
    arg(p, "job_id", metavar="JOB", complete="jobs")
    server(p)

    p = t.command(
        admin,
        "grades",
        A + "grades",
        "One row per student on the roster: the run that counts, its figures, the grade, or 0 and why.",
        admin=True,
    )
    arg(p, "kind", metavar="KIND", complete="kinds", help="the kind whose grades, by its rule (raiclient admin kinds set KIND --grade …)")
    arg(
        p,
        "--format",
        dest="fmt",
        choices=("csv", "canvas"),
        default="csv",
        help="csv: every figure behind each grade; canvas: Canvas's gradebook import",
    )
    arg(p, "--assignment", metavar="NAME", help="canvas: the assignment's column, e.g. 'Final Project (123456)'")
    arg(p, "-o", "--output", type=Path, metavar="FILE", help="write here (default: print)")
    server(p)

    p = t.command(
        admin,
        "regrades",
        A + "regrades",
        "The open regrade requests, oldest first (staff): answer each with 'raiclient admin regrade ID'.",
        admin=True,
    )
    arg(p, "--all", dest="everything", action="store_true", help="the answered requests too, newest first")
    server(p)
    p = t.command(
        admin,
        "regrade",
        A + "regrade",
        "Answer a regrade request (staff; audited): --remeasure, --grade G --reason WHY, or --answer TEXT alone.",
        admin=True,
    )
    arg(p, "request_id", type=count(1), metavar="ID", help="the request's number (#ID in 'raiclient admin regrades')")
    arg(p, "--remeasure", dest="measure_again", action="store_true", help="measure the run again (ranked runs)")
    arg(p, "--repeats", type=count(2, 20), default=10, metavar="N", help="timed runs of the re-measure")
    arg(p, "--grade", metavar="GRADE", help="the adjusted grade (with --reason)")
    arg(p, "--reason", default="", metavar="WHY", help="why the grade changes (the student reads it)")
    arg(p, "--answer", default="", metavar="TEXT", help="what the student reads; alone, it closes the request")
    server(p)

    p = t.command(
        admin,
        "similarity",
        A + "similarity",
        "Compare each team's latest submission of KIND, pair by pair (staff; made in the background):",
        "prints the progress, then the most similar pairs and the page that shows them side by side.",
        admin=True,
    )
    arg(p, "kind", metavar="KIND", complete="kinds", help="the kind whose teams' latest submissions are compared, e.g. final")
    arg(p, "--starter", type=existing_file, metavar="FILE", help="the course's starter code (e.g. new-forward.cu): never counts as a match")
    arg(p, "-n", dest="show", type=count(0, 50), default=10, metavar="N", help="how many of the most similar pairs to print")
    arg(p, "-d", "--detach", action="store_true", help="start it and return at once")
    server(p)

    p = t.command(admin, "audit", A + "audit", "Recent staff actions, newest first: one line each (--json: every detail).", admin=True)
    arg(p, "-n", dest="limit", type=count(1), default=50, metavar="N", help="how many (default: 50)")
    arg(p, "--action", metavar="ACTION", help="only this action, or a family: 'kind' is kind.change, kind.extend, …")
    arg(p, "--actor", metavar="USER", help="only what this user did")
    as_json(p)
    server(p)

    images = t.group(admin, "images", "Images on the workers.")
    p = t.command(
        images,
        "pull",
        A + "images_pull",
        "Have every worker pull IMAGE from its registry (on the worker host; jobs have no network).",
        admin=True,
    )
    arg(p, "image", metavar="IMAGE")
    server(p)
    p = t.command(
        images,
        "load",
        A + "images_load",
        "Upload a saved image; every worker downloads it from the server and loads it (no registry needed).",
        admin=True,
    )
    arg(p, "tar", type=existing_file, metavar="TAR", help="a `docker save NAME:TAG -o FILE.tar` archive")
    server(p)

    course = t.group(admin, "course", "The course's build files for ranked kinds.")
    p = t.command(
        course,
        "install",
        A + "course_install",
        "Install a new version of KIND's build file: from now on KIND's submissions run it, and only",
        "their runs, timed and checked by the service, rank.",
        admin=True,
    )
    arg(p, "kind", metavar="KIND", complete="kinds", help="the ranked kind, e.g. final")
    arg(p, "build_file", type=existing_file, metavar="BUILD_FILE", help="the course's build file, with its 'ranked:' section")
    arg(p, "--labels", type=existing_file, metavar="FILE", help="unused since issue 46: the course's reference computes the answers")
    server(p)
    p = t.command(course, "show", A + "course_show", "The build file each ranked kind runs now.", admin=True)
    as_json(p)
    server(p)

    _kinds(t, t.group(admin, "kinds", "Submission kinds: openings, deadlines, late policies, grade rules, extensions."))


def _kinds(t: Tree, kinds: argparse.ArgumentParser) -> None:
    p = t.command(kinds, "show", K + "show", "Every kind: opening, deadline, late policy, grade rule, extensions granted.", admin=True)
    server(p)
    p = t.command(kinds, "set", K + "set_kind", "Create a kind or change it: only the options given change.", admin=True)
    arg(p, "name", metavar="NAME", complete="kinds", help="the kind, e.g. m1 or final (created if new)")
    arg(p, "--opens", metavar="WHEN", help="ISO 8601, e.g. 2026-03-01T09:00-06:00 (no offset: UTC); 'none' clears")
    arg(p, "--due", metavar="WHEN", help="the deadline, ISO 8601; 'none' clears")
    arg(p, "--late-policy", dest="policy", metavar="POLICY", help="refuse | mark (accept, mark late) | days (draw late days)")
    arg(p, "--late-hours", type=float, metavar="H", help="the late window after each student's deadline; 0: no end")
    arg(p, "--grade", metavar="RULE", help=f"{' | '.join(graderules.RULES)}: the grade rule (with the options below)")
    for name, param in graderules.PARAMS.items():  # a rule's numbers, as raiprotocol.graderules says them
        arg(p, f"--{name.replace('_', '-')}", type=float, metavar=param.metavar, help=graderules.label(name))
    server(p)
    p = t.command(kinds, "remove", K + "remove", "Remove a kind that has no runs (one with runs: close it with --due instead).", admin=True)
    arg(p, "name", metavar="NAME", complete="kinds")
    server(p)
    p = t.command(
        kinds,
        "extend",
        K + "extend",
        "Give one student or one team a later deadline on KIND (replacing an earlier extension of theirs).",
        admin=True,
    )
    arg(p, "kind", metavar="KIND", complete="kinds")
    arg(p, "--student", metavar="USER", help="the student's username")
    arg(p, "--team", metavar="TEAM", help="or a whole team")
    arg(p, "--until", metavar="WHEN", help="the new deadline, ISO 8601")
    arg(p, "--hours", type=float, metavar="H", help="or this many hours after the kind's deadline")
    arg(p, "--reason", default="", metavar="WHY")
    server(p)
    p = t.command(
        kinds, "unextend", K + "unextend", "End a student's or team's extension: the kind's own deadline applies again.", admin=True
    )
    arg(p, "kind", metavar="KIND", complete="kinds")
    arg(p, "--student", metavar="USER")
    arg(p, "--team", metavar="TEAM")
    server(p)
    p = t.command(kinds, "extensions", K + "extensions", "The extensions granted on KIND.", admin=True)
    arg(p, "kind", metavar="KIND", complete="kinds")
    server(p)
