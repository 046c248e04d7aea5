"""The build file, `rai_build.yml`: one model for client (before upload) and server (again).

Errors carry the file name and the line of the offending node so a student can fix the file
without guessing: ``rai_build.yml:7: commands.build must be a list of strings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .project import SPEC_FILENAME

MAX_SPEC_BYTES = 64 * 1024
MAX_COMMANDS = 1000
MAX_COMMAND_CHARS = 8192


def normalize_image(name: str) -> str:
    """One spelling per image, as Docker resolves it: ``busybox`` = ``busybox:latest`` =
    ``docker.io/library/busybox:latest``. Worker lists and build files are compared in this form."""
    name = name.strip()
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if "@" not in name and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


class SpecError(ValueError):
    """A build file that cannot be used; ``str()`` is the line-numbered message for the user."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("\n".join(messages))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RaiSection(_Strict):
    version: float | str = "0.2"
    image: str = Field(min_length=1, max_length=256)


class CPU(_Strict):
    architecture: Literal["amd64", "arm64", "ppc64le"] = "amd64"


class GPU(_Strict):
    count: int = Field(default=0, ge=0, le=16)
    architecture: str | None = None
    exclusive: bool = False


class Limits(_Strict):
    """Optional requests for less than the queue's defaults; the worker never grants more."""

    wall_seconds: int | None = Field(default=None, gt=0)
    command_seconds: int | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)


class Resources(_Strict):
    cpu: CPU = CPU()
    gpu: GPU = GPU()
    network: bool = False
    limits: Limits = Limits()

    @field_validator("network")
    @classmethod
    def _no_network(cls, value: bool) -> bool:
        if value:
            raise ValueError("jobs run without network access; set it to false or remove it")
        return value


class Commands(_Strict):
    build: list[str] = Field(min_length=1, max_length=MAX_COMMANDS)

    @field_validator("build")
    @classmethod
    def _commands_not_blank(cls, value: list[str]) -> list[str]:
        for i, cmd in enumerate(value):
            if not cmd.strip():
                raise ValueError(f"command {i + 1} is empty")
            if len(cmd) > MAX_COMMAND_CHARS:
                raise ValueError(f"command {i + 1} is longer than {MAX_COMMAND_CHARS} characters")
        return value


class BuildSpec(_Strict):
    rai: RaiSection
    resources: Resources = Resources()
    commands: Commands

    @property
    def image(self) -> str:
        return self.rai.image

    @property
    def gpu_count(self) -> int:
        return self.resources.gpu.count


# -- loading ------------------------------------------------------------------------------------

_HUMAN = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "list_type": "must be a list of strings",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "too_short": "must not be empty",
}


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """Walk the composed YAML tree along a pydantic error location to the nearest line."""
    line = node.start_mark.line + 1 if node is not None else 1
    for key in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if k.value == key), None)
            if child is None:  # unknown key or missing key: point at the key, else the parent
                keynode = next((k for k, _ in node.value if k.value == key), None)
                return keynode.start_mark.line + 1 if keynode is not None else line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            child = node.value[key]
        if child is None:
            return line
        node, line = child, child.start_mark.line + 1
    return line


def _reject_aliases(text: str, filename: str) -> None:
    """Anchors and aliases are how YAML bombs expand; a build file never needs them."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = event.start_mark.line + 1 if event.start_mark else 1
                raise SpecError([f"{filename}:{line}: YAML anchors and aliases are not allowed"])
    except yaml.YAMLError as exc:
        raise SpecError([_yaml_error(exc, filename, text)]) from None


def _yaml_error(exc: yaml.YAMLError, filename: str, text: str = "") -> str:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else 1
    line = max(1, min(line, len(text.rstrip("\n").splitlines()) or 1))  # "end of file" → the last line
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{filename}:{line}: malformed YAML: {problem}"


MAX_NESTING = 32


def _check_nesting(text: str, filename: str) -> None:
    """Refuse deep nesting before any YAML parser sees it: PyYAML takes minutes over a 64 KiB
    file of '[', and overflows its recursion (libyaml crashes) on '- - - …'. The count is
    deliberately blunt (brackets in quoted commands count too): no real build file comes near."""
    depth = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        body = line.lstrip(" ")
        if len(line) - len(body) > 8 * MAX_NESTING:
            raise SpecError([f"{filename}:{lineno}: indented too deeply (nesting is limited to {MAX_NESTING} levels)"])
        compact = 0
        while body[:2] in ("- ", "? ", "-\t") or body in ("-", "?"):
            compact += 1
            body = body[2:].lstrip(" ")
        for ch in line:
            if ch in "[{":
                depth += 1
            elif ch in "]}" and depth:
                depth -= 1
        if compact > MAX_NESTING or depth > 2 * MAX_NESTING:
            raise SpecError([f"{filename}:{lineno}: nested too deeply (nesting is limited to {MAX_NESTING} levels)"])


def parse_spec(data: bytes | str, filename: str = SPEC_FILENAME) -> BuildSpec:
    """Parse and validate a build file; raise SpecError with line-numbered messages."""
    if isinstance(data, bytes):
        if len(data) > MAX_SPEC_BYTES:
            raise SpecError([f"{filename}: file is larger than {MAX_SPEC_BYTES // 1024} KiB"])
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError([f"{filename}: not UTF-8 text (byte {exc.start})"]) from None
    else:
        text = data
        if len(text.encode()) > MAX_SPEC_BYTES:
            raise SpecError([f"{filename}: file is larger than {MAX_SPEC_BYTES // 1024} KiB"])
    _check_nesting(text, filename)
    try:
        _reject_aliases(text, filename)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([_yaml_error(exc, filename, text)]) from None
    except RecursionError:
        raise SpecError([f"{filename}: nested too deeply (nesting is limited to {MAX_NESTING} levels)"]) from None
    if raw is None:
        raise SpecError([f"{filename}:1: the file is empty; it needs 'rai:' and 'commands:' sections"])
    if not isinstance(raw, dict):
        raise SpecError([f"{filename}:1: the top level must be a mapping with 'rai:' and 'commands:'"])
    try:
        return BuildSpec.model_validate(raw)
    except ValidationError as exc:
        messages = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            dotted = ".".join(str(p) for p in loc) or "(top level)"
            human = _HUMAN.get(err["type"])
            if human is None:
                human = err["msg"].removeprefix("Value error, ")
            if err["type"] == "list_type" and loc and loc[-1] != "build":
                human = "must be a list"
            if err["type"] in ("less_than_equal", "greater_than_equal", "greater_than") and err.get("ctx"):
                bound = next(iter(err["ctx"].values()))
                human = {"less_than_equal": f"must be at most {bound}", "greater_than_equal": f"must be at least {bound}",
                         "greater_than": f"must be more than {bound}"}[err["type"]]
            if err["type"] == "too_long" and err.get("ctx"):
                human = f"must have at most {err['ctx'].get('max_length')} entries"
            if err["type"] == "string_type" and isinstance(err.get("input"), dict):
                human += " (YAML read it as a mapping because it contains ': '; put the whole command in quotes)"
            messages.append(f"{filename}:{_line_of(node, loc)}: {dotted} {human}")
        raise SpecError(messages) from None


def load_spec(project_dir: Path) -> BuildSpec:
    """Read ``rai_build.yml`` from a project folder."""
    path = project_dir / SPEC_FILENAME
    if not path.is_file():
        raise SpecError([f"{path}: not found; every project needs a {SPEC_FILENAME} (see examples/hello)"])
    return parse_spec(path.read_bytes(), filename=SPEC_FILENAME)
