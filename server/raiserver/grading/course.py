"""The course's build files for ranked kinds (issue 23).

A ranked submission runs the build file the instructors installed, not the student's: the
student's archive supplies only the files the course names (``ranked.student_files``); the harness,
data and tools come from the course's image. Each install is a new version; a job records the
version it ran, and its page says so. The answers are the course's reference's outputs on each
run's own inputs (issue 46): no labels are needed, and none that a student could read are used.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from raiprotocol.spec import CourseSpec, SpecError, parse_course_spec
from raiserver.errors import Invalid
from raiserver.store.tables import CourseBuild

MAX_LABELS_BYTES = 4 * 1024 * 1024


def install(db: Session, kind: str, spec_text: str, labels: str, by: str, ranked_kinds: set[str]) -> CourseBuild:
    """Check and store a new version of ``kind``'s course build file; Invalid says what is wrong."""
    if kind not in ranked_kinds:
        raise Invalid(
            f"'{kind}' is not a ranked kind of this course (ranked: {', '.join(sorted(ranked_kinds)) or 'none'}); "
            "set RAI_RANKED_KINDS to rank it"
        )
    try:
        spec = parse_course_spec(spec_text)
    except SpecError as exc:
        raise Invalid(str(exc)) from None
    if spec.ranked.measure != "op":
        raise Invalid(
            f"ranked.measure: {spec.ranked.measure} no longer ranks (issue 46: profiler kernel times and a command's "
            "wall time against public labels can be won without the work); time the operation with the course's "
            "harness (rai_op.h) and set measure: op and ranked.reference"
        )
    if not spec.ranked.reference:
        raise Invalid("ranked.reference is required: the course's command that computes the same operations (its outputs are the answers)")
    if len(labels.encode()) > MAX_LABELS_BYTES:
        raise Invalid(f"the labels are larger than {MAX_LABELS_BYTES // 1024**2} MiB")
    version = (db.scalar(select(func.max(CourseBuild.version)).where(CourseBuild.kind == kind)) or 0) + 1
    row = CourseBuild(kind=kind, version=version, spec_yaml=spec_text, labels=labels, installed_by=by)
    db.add(row)
    db.flush()
    return row


def current(db: Session, kind: str) -> CourseBuild | None:
    """The newest installed version for ``kind``: the one new submissions run."""
    return db.scalars(select(CourseBuild).where(CourseBuild.kind == kind).order_by(CourseBuild.version.desc()).limit(1)).first()


def spec_of(row: CourseBuild) -> CourseSpec:
    return parse_course_spec(row.spec_yaml)


def student_part(archive: Path, names: list[str], dest: Path) -> int:
    """Write to ``dest`` an archive holding only the course's named files from the student's
    (already inspected) archive, as regular files; returns its size. Missing names are the
    caller's check (missing_for_kind), links and folders are refused here."""
    with tarfile.open(archive, "r:gz") as src, tarfile.open(dest, "w:gz") as out:
        wanted = set(names)
        for member in src:
            name = member.name.removeprefix("./")
            if name not in wanted:
                continue
            if not member.isreg():
                raise Invalid(f"'{name}' must be a regular file in your project (it is a link or a folder)")
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = member.size, 0o644, member.mtime
            out.addfile(info, src.extractfile(member))  # streamed: a big file is never held in memory
            wanted.discard(name)
    return dest.stat().st_size
