"""A kind's grades as files (issue 36): rai's own CSV, every figure behind each grade, and Canvas's
gradebook import CSV. Cells a spreadsheet would run as a formula are quoted with a leading '."""

from __future__ import annotations

import csv
import io
import unicodedata

from raiserver.errors import Invalid
from raiserver.grading.grades import GradeRow, submitted, timing

FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _text(value: str) -> str:
    """A roster's text as a spreadsheet shows it, never as a formula."""
    return "'" + value if value.startswith(FORMULA) else value


def _assignment(name: str) -> str:
    """The Canvas column's name as a header cell: never a formula (a leading '), and never a line
    break or control, which would start a row of its own in a spreadsheet or Canvas's import."""
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        raise Invalid(f"the Canvas assignment name holds a line break or control character (U+{ord(bad):04X}); give it on one line")
    return _text(name)


def rai_csv(rows: list[GradeRow], base_url: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "username",
            "name",
            "email",
            "team",
            "job",
            "link",
            "op_time_s",
            "accuracy",
            "measured",
            "submitted",
            "on_time",
            "grade",
            "points",
            "reason",
        ]
    )
    for r in rows:
        g = r.run
        when = submitted(g)
        w.writerow(
            [
                r.username,
                _text(r.name),
                _text(r.email),
                _text(r.team),
                g.job.id if g else "",
                f"{base_url}/jobs/{g.job.id}" if g else "",
                f"{g.op_time:.9f}" if g and g.op_time is not None else "",
                f"{g.accuracy:.6g}" if g and g.accuracy is not None else "",
                ("yes" if g.measured else "no") if g else "",
                when.isoformat() if when else "",
                timing(g),
                f"{r.grade:g}",
                f"{r.points:g}",
                _text(r.reason),
            ]
        )
    return buf.getvalue()


def canvas_csv(rows: list[GradeRow], assignment: str) -> str:
    """Canvas's gradebook import: Student ("Last, First"), ID, SIS User ID, SIS Login ID, Section, then
    the assignment's column ("Name (canvas id)" names an existing assignment; a new name makes one),
    with the "Points Possible" row Canvas's own export has. Canvas matches students by SIS Login ID:
    the roster's username; ID and SIS User ID are Canvas's own and left empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", _assignment(assignment)])
    w.writerow(["Points Possible", "", "", "", "", f"{rows[0].points:g}" if rows else ""])
    for r in rows:
        student = f"{r.last}, {r.first}" if r.last else (r.first or r.username)
        w.writerow([_text(student), "", "", r.username, "", f"{r.grade:g}"])
    return buf.getvalue()
