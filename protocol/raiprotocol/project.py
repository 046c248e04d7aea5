"""What a project folder must hold before it is worth uploading: its build file, and the files its
submission kind requires. Plain Python (no pydantic): the client's submit path checks these first."""

from __future__ import annotations

from pathlib import Path

SPEC_FILENAME = "rai_build.yml"

# Files a submission kind must contain (the server's configuration has the final word).
KIND_REQUIRED_FILES = {"final": ["report.pdf"]}


def no_spec(path: Path | str) -> str:
    """A project without a build file: the smallest one, on one line (the one-file client has no
    examples/ folder to look at) and where the whole format is."""
    return (
        f"{path}: not found; every project needs a {SPEC_FILENAME}, the smallest is the two lines "
        "'rai: {version: 0.2, image: IMAGE}' and 'commands: {build: [COMMAND]}' "
        '(raiclient images lists the images; the whole format: docs/students.md, "The build file")'
    )


def missing_for_kind(kind: str, present: set[str] | frozenset[str], required: dict[str, list[str]] | None = None) -> list[str]:
    return [f for f in (required or KIND_REQUIRED_FILES).get(kind, []) if f not in present]


def project_problem(project_dir: Path, kind: str) -> str | None:
    """Why this folder cannot be submitted as this kind, found without reading the build file."""
    if not (project_dir / SPEC_FILENAME).is_file():
        return no_spec(project_dir / SPEC_FILENAME)
    missing = missing_for_kind(kind, {p.name for p in project_dir.iterdir() if p.is_file()})
    if missing:
        return f"a '{kind}' submission must include {', '.join(missing)} (not found in {project_dir})"
    return None
