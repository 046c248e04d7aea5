"""The one definition of the ``raiclient`` command line, on the standard library's argparse: every
command, option and help text, what runs each (``run``: "module:function", imported only when
that command runs) and what completes each value (``complete``: "kinds", "jobs", "shells"); the
staff's commands are in ``commands_admin.py``, the pieces in ``argtree.py``.

The help, the parsing, the completion (``complete.py``) and ``raiclient.pyz`` all read this one
tree, so nothing is kept in step by hand. Building it imports the standard library alone.
"""

from __future__ import annotations

import argparse

from .argtree import Tree, arg, as_json, count, job, server
from .commands_admin import build as build_admin

SHELLS = ("bash", "zsh", "fish")
COLOR_HELP = "Colour codes: auto (on a terminal, unless NO_COLOR is set), always, never (anywhere on the line)."


def build() -> argparse.ArgumentParser:
    """The whole command line."""
    t = Tree()
    top = t.top
    arg(top, "--color", choices=("auto", "always", "never"), default="auto", help=COLOR_HELP)
    arg(top, "--version", action="store_true", help="Print the client's version and exit.")
    arg(top, "--show-completion", metavar="SHELL", nargs="?", const="", complete="shells", help="Print the shell's completion script.")
    arg(top, "--install-completion", metavar="SHELL", nargs="?", const="", complete="shells", help="Install completion for the shell.")
    _student(t, top)
    build_admin(t, t.group(top, "admin", "Course management (instructors and admins)."))
    return top


def _student(t: Tree, top: argparse.ArgumentParser) -> None:
    p = t.command(top, "submit", "raiclient.submit:main", "Upload a project folder and run its rai_build.yml on a GPU worker.")
    arg(p, "-p", "--path", default=".", metavar="DIR", help="project folder holding rai_build.yml (default: .)")
    arg(p, "-q", "--queue", metavar="QUEUE", help="queue to run on (default: the server's)")
    arg(p, "--kind", default="dev", metavar="KIND", complete="kinds", help="submission kind, e.g. m1, m2, m3, final (default: dev)")
    arg(p, "-d", "--detach", action="store_true", help="queue the job and return at once")
    server(p)
    p = t.command(top, "logs", "raiclient.follow:main", "Print a job's log (whole, or live with --follow).")
    job(p, optional=True)
    arg(p, "-f", "--follow", action="store_true", help="keep following until the job ends")
    arg(p, "--after", type=count(0), default=0, metavar="LINE", help="start after this line (resume where a client stopped)")
    server(p)
    p = t.command(
        top,
        "status",
        "raiclient.jobs_view:status",
        "Show a job's state (your last one by default); the exit status is the job's, as with submit.",
    )
    job(p, optional=True)
    as_json(p)
    server(p)
    p = t.command(
        top,
        "queue",
        "raiclient.course_view:queue",
        "Jobs waiting and running per queue, the workers serving it, and where your jobs stand.",
    )
    as_json(p)
    server(p)
    p = t.command(top, "images", "raiclient.course_view:images", "The images each queue can run (those its live workers hold).")
    as_json(p)
    server(p)
    p = t.command(top, "history", "raiclient.jobs_view:history", "Your recent jobs, newest first.")
    arg(p, "-n", dest="limit", type=count(1), default=20, metavar="N", help="how many jobs (default: 20)")
    as_json(p)
    server(p)
    p = t.command(top, "download", "raiclient.jobs_view:download", "Download a job's build folder as a .tar.gz.")
    job(p, optional=True)
    arg(p, "-o", "--output", metavar="FILE", help="file to write (default: build-JOB.tar.gz)")
    server(p)
    p = t.command(top, "ranking", "raiclient.course_view:ranking", "The leaderboard: each team's fastest valid run (yours is marked -->).")
    arg(p, "-n", dest="limit", type=count(1), metavar="N", help="show the top N")
    as_json(p)
    server(p)
    p = t.command(
        top,
        "kinds",
        "raiclient.course_view:kinds",
        "What you can submit: each kind's opening and your own deadline, and the limits you have left.",
    )
    server(p)
    p = t.command(
        top, "limits", "raiclient.course_view:limits", "Your limits now: jobs active, submissions and GPU minutes left, late days left."
    )
    server(p)
    p = t.command(top, "cancel", "raiclient.jobs_view:cancel", "Cancel a queued or running job.")
    job(p)
    server(p)
    p = t.command(
        top,
        "delete",
        "raiclient.jobs_view:delete",
        "Free storage: delete finished jobs' archives and build folders (their logs and results stay).",
    )
    arg(p, "job_ids", nargs="+", metavar="JOB", complete="jobs", help="finished jobs")
    server(p)
    p = t.command(
        top,
        "regrade",
        "raiclient.course_view:regrade",
        "Ask staff for a regrade of a run that has ended, saying why (one open request per run).",
    )
    job(p)
    arg(p, "message", metavar="MESSAGE", help="what staff should look at again (up to 2000 characters)")
    server(p)
    p = t.command(top, "regrades", "raiclient.course_view:regrades", "Your regrade requests and what became of them, newest first.")
    server(p)
    p = t.command(top, "login", "raiclient.login:main", "Check credentials with the server and write them to ~/.rai_profile.")
    arg(p, "--server", metavar="URL", help="the rai server's URL (default: RAI_SERVER, else your profile's)")
    arg(p, "--access-key", metavar="KEY", help="from your instructor")
    arg(p, "--secret-key", metavar="SECRET", help="from your instructor")
    p = t.command(
        top, "version", "raiclient.about:version", "Print the client's version (and the server's, when a profile names one that answers)."
    )
    as_json(p)
    server(p)
    p = t.command(top, "completion", "raiclient.complete:script", "Print the shell completion script (bash, zsh or fish).")
    arg(
        p,
        "shell",
        nargs="?",
        choices=SHELLS,
        complete="shells",
        help="the shell (default: $SHELL's), e.g. raiclient completion bash > ~/.local/share/bash-completion/completions/raiclient",
    )
