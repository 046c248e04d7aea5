"""``raiclient admin similarity``: follow a report as the server makes it, then print its most
similar pairs (issue 36). Ctrl-C stops following; the report goes on on the server."""

from __future__ import annotations

import time

from raiprotocol.models import SimilarityOut

from . import table
from .api import Api
from .output import cell, say

POLL_SECONDS = 1.0


def team(name: str, members: list[str]) -> str:
    """A team and its students (issue 49), as the table shows it: "sim-a (ann, bob)"."""
    return cell(name if not members or members == [name] else f"{name} ({', '.join(members)})")


def follow(api: Api, report_id: int, show: int) -> SimilarityOut:
    """A line each time the phase changes or another tenth is done, until the report ends."""
    last = ("", -1)
    while True:
        r = api.similarity(report_id, show)
        if r.state in ("done", "failed"):
            if r.state == "done" and r.phase == "comparing" and r.total and last != ("comparing", 10):
                say(f"{r.done}/{r.total} pairs compared")  # it ended between two looks: the trail stays whole
            break
        tenth = (10 * r.done // r.total) if r.total else 0
        if r.state == "running" and r.phase == "comparing" and last[0] != "comparing" and last != ("reading", 10) and r.teams:
            say(f"{r.teams}/{r.teams} teams read")  # the reading ended between two looks: the trail stays whole
        if r.state == "running" and r.phase and r.total and (r.phase, tenth) != last:  # no "0/0" before the total is known
            unit = "teams read" if r.phase == "reading" else "pairs compared"
            say(f"{r.done}/{r.total} {unit}")
            last = (r.phase, tenth)
        time.sleep(POLL_SECONDS)
    if r.state == "failed":
        say(f"Similarity report #{r.id} {cell(r.message or 'failed')}")
        return r
    took = f" in {(r.finished_at - r.started_at).total_seconds():.1f} s" if r.finished_at and r.started_at else ""
    say(f"Similarity report #{r.id} done{took}: {cell(r.message or '')}")
    if show and r.pairs:
        rows = [
            (str(i), team(p.a, p.a_members), team(p.b, p.b_members), f"{p.score:.0%}", f"{p.share_a:.0%} / {p.share_b:.0%}", str(p.tokens))
            for i, p in enumerate(r.pairs, 1)
        ]
        table.show(("#", "team", "team", "similarity", "shares", "tokens"), rows, box=True)
        say(f"Side by side, the matching regions highlighted: {api.server}/similarity/{r.id}/pairs/1")
    elif show:
        say("No two teams share code beyond the starter")
    return r
