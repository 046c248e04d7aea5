"""What a project folder must hold before it is worth uploading: its build file, and the files its
submission kind requires. Plain Python (no pydantic): the client's submit path checks these first."""

from __future__ import annotations

from pathlib import Path

SPEC_FILENAME = "rai_build.yml"

# Files a submission kind must contain (the server's configuration has the final word).
KIND_REQUIRED_FILES = {"final": ["report.pdf"]}


def missing_for_kind(kind: str, present: set[str] | frozenset[str], required: dict[str, list[str]] | None = None) -> list[str]:
    return [f for f in (required or KIND_REQUIRED_FILES).get(kind, []) if f not in present]


def project_problem(project_dir: Path, kind: str) -> str | None:
    """Why this folder cannot be submitted as this kind, found without reading the build file."""
    if not (project_dir / SPEC_FILENAME).is_file():
        return f"{project_dir / SPEC_FILENAME}: not found; every project needs a {SPEC_FILENAME} (see examples/hello)"
    missing = missing_for_kind(kind, {p.name for p in project_dir.iterdir() if p.is_file()})
    if missing:
        return f"a '{kind}' submission must include {', '.join(missing)} (not found in {project_dir})"
    return None
