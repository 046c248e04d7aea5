"""The build file, `rai_build.yml`: one model for client (before upload) and server (again).

Errors carry the file name and the line of the offending node so a student can fix the file
without guessing: ``rai_build.yml:7: commands.build must be a list of strings``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .project import SPEC_FILENAME, no_spec

FILE_GLOB = re.compile(r"[A-Za-z0-9._+*?-]{1,100}")  # ranked.forbid: a file name's glob, never a path

MAX_SPEC_BYTES = 64 * 1024
MAX_COMMANDS = 1000
MAX_COMMAND_CHARS = 8192


def normalize_image(name: str) -> str:
    """One spelling per image, as Docker resolves it: ``busybox`` = ``busybox:latest`` =
    ``docker.io/library/busybox:latest``. Worker lists and build files are compared in this form."""
    name = name.strip()
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
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
            raise ValueError("jobs run without network access; set it to false or remove the line")
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


_FILE_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-/")


def plain_file_name(name: str) -> bool:
    """A relative path inside the project: no leading '/', no '..' or empty parts, common characters."""
    parts = name.split("/")
    return 0 < len(name) <= 200 and set(name) <= _FILE_CHARS and all(p not in ("", ".", "..") for p in parts)


class Ranked(_Strict):
    """What only the course's build file has (issue 23): which files a ranked submission supplies,
    the command the service times itself, and how it measures and checks it."""

    student_files: list[str] = Field(min_length=1, max_length=20)  # taken from the student's project
    timed: str = Field(min_length=1, max_length=MAX_COMMAND_CHARS)  # run after the build commands
    repeats: int = Field(default=5, ge=1, le=20)  # timed runs, each a fresh process and container
    # how many times over each timed run (and its reference) does the course's operations, each time
    # on new inputs (the harness reads RAI_OP_PASSES: rai_op_passes()). Every pass of every run is a
    # sample; the median pass ranks and the spread is shown: more samples for little more than
    # their operations' time (a run's start, CUDA's context, is paid once a run)
    passes: int = Field(default=1, ge=1, le=16)
    # Issue 46: op: the course's harness (rai_op.h) marks each operation's begin and end; rai-timed,
    # out of the job's reach, holds the clock, draws the inputs and takes the outputs, which are
    # checked against ``reference`` run on the same inputs. kernels and wall (profiler kernel times,
    # a command's wall time against public labels) rank nothing any more: installs refuse them
    measure: Literal["op", "kernels", "wall"] = "op"
    # the course's command computing the same operations (its own code, e.g. the instructors' kernel),
    # run under rai-timed on the same inputs in a container of its own, after the student's
    reference: str | None = Field(default=None, min_length=1, max_length=MAX_COMMAND_CHARS)
    # the outputs may differ from the reference's by this much (relative L2 norm of the difference,
    # and each sampled value relative to the outputs' RMS): fp32 in another order ~1e-6; tf32 or
    # bfloat16 inputs ~1e-3 do not pass
    rtol: float = Field(default=1e-4, gt=0, le=1)
    # one timed run's bound (seconds): past it the run is stopped and does not rank, and the host is
    # free again. None: 20x the reference's run (at least 5 s), at most 120 s
    timed_seconds: float | None = Field(default=None, gt=0, le=3600)
    # the physics floor: a total below it is not ranked (and is listed for staff). floor_seconds, or
    # flops and bytes (per timed run, all operations) against the GPU's peaks (raiprotocol.peaks)
    floor_seconds: float | None = Field(default=None, gt=0)
    flops: float | None = Field(default=None, gt=0)
    bytes: float | None = Field(default=None, gt=0)
    # ranked submissions per student per day (None: no limit): no lottery of resubmissions
    per_day: int | None = Field(default=None, ge=1, le=1000)
    predictions: str = "predictions.txt"  # unused since issue 46 (course files from before it)
    tolerance: float = Field(default=0.25, gt=0, le=10)  # printed vs measured op time: flagged past this fraction
    # Issue 32: what of the build's /build each timed run starts from (None: all of it); each timed
    # run gets a fresh container with these files only and an empty /tmp, so nothing a student's
    # code left in the build (or an earlier timed run) can be used: no cache, no precomputed answers
    keep: list[str] | None = Field(default=None, max_length=50)
    # the CPU time (every process of the run, seconds) a timed run may use: a run that computed its
    # answers on the host's CPU instead of the GPU does not rank. None: not checked
    cpu_seconds: float | None = Field(default=None, gt=0, le=3600)
    # C25 (library fallback): file names (globs: libcudnn*, libcublas*) the course rules out of timed
    # runs. Every file of the image so named is removed from each of the student's timed runs'
    # containers before any of their code runs there, so no such library loads, however it is asked
    # for (linked, dlopen'ed, read and mapped); the reference's container keeps them
    forbid: list[str] | None = Field(default=None, max_length=20)
    # the student files the course's build reads (None: all of student_files): the others (a report)
    # never reach the container where the student's source is compiled, so no bytes of theirs can be
    # carried into the program (an .incbin of a "report" that is a library)
    build_files: list[str] | None = Field(default=None, max_length=20)
    seeded: bool = False  # unused since issue 46: every operation's inputs are drawn for it
    # feedback and a cross-check, never the ranked number: after the timed runs, the student's
    # program runs once more under this command (a profiler around the timed command: nsys profile
    # ... ./m2 10000, then nsys stats --report cuda_gpu_kern_sum), on inputs drawn for it, in a
    # fresh container, untimed and unchecked. Its kernel table is the student's; a kernel total
    # the measured operations cannot contain is flagged for staff
    profile: str | None = Field(default=None, min_length=1, max_length=MAX_COMMAND_CHARS)

    @field_validator("student_files")
    @classmethod
    def _plain_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not plain_file_name(name) or name == SPEC_FILENAME:
                raise ValueError(f"'{name}' is not a plain relative file name (nor may it be {SPEC_FILENAME})")
        return value

    @field_validator("keep")
    @classmethod
    def _plain_kept(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not plain_file_name(name):
                raise ValueError(f"'{name}' is not a plain relative file name")
        return value

    @model_validator(mode="after")
    def _built_from_student_files(self) -> Ranked:
        stray = [name for name in self.build_files or [] if name not in self.student_files]
        if stray:
            raise ValueError(f"build_files names {', '.join(stray)}, which is not among student_files")
        return self

    @field_validator("forbid")
    @classmethod
    def _name_globs(cls, value: list[str] | None) -> list[str] | None:
        for glob in value or []:
            if not FILE_GLOB.fullmatch(glob) or not glob.strip("*?"):
                raise ValueError(f"'{glob}' is not a file name or a glob of one (letters, digits, . _ + - * ?)")
        return value

    @field_validator("predictions")
    @classmethod
    def _plain_predictions(cls, value: str) -> str:
        if not plain_file_name(value):
            raise ValueError(f"'{value}' is not a plain relative file name")
        return value


class CourseSpec(BuildSpec):
    """The course's build file for a ranked kind: a build file with a ``ranked`` section."""

    ranked: Ranked


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


def _where(loc: tuple[Any, ...]) -> str:
    """A field's place for people: ``commands.build, command 1`` (counted from 1), not ``commands.build.0``."""
    names: list[str] = []
    for part in loc:
        if isinstance(part, int):
            noun = "command" if names and names[-1] == "build" else "item"
            names[-1] += f", {noun} {part + 1}"
        else:
            names.append(str(part))
    return ".".join(names) or "(top level)"


def _read_as(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    return f"the number {value}"


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...], at_key: bool = False) -> int:
    """Walk the composed YAML tree along a pydantic error location to the nearest line (``at_key``:
    the field's key's line, not its value's: an unknown field whose value is a mapping)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for depth, key in enumerate(loc, 1):
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if k.value == key), None)
            keynode = next((k for k, _ in node.value if k.value == key), None)
            if child is None or (at_key and depth == len(loc) and keynode is not None):  # unknown or missing key: its line
                return keynode.start_mark.line + 1 if keynode is not None else line
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            child = node.value[key]
        if child is None:
            return line
        node, line = child, child.start_mark.line + 1
    return line


# PyYAML's C parser (libyaml, in its wheels) where present: ~10× faster than the Python one
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A build file of MAX_COMMANDS commands is about that many events; past this many the parser stops,
# so a 64 KiB file of tiny flow collections costs milliseconds, not seconds
MAX_EVENTS = 20 * MAX_COMMANDS


def _check_events(text: str, filename: str) -> None:
    """One cheap pass over the parser's events before anything is built from them: anchors and
    aliases (how YAML bombs expand; a build file never needs them) and the file's size in nodes."""
    for count, event in enumerate(yaml.parse(text, Loader=_Loader)):
        line = event.start_mark.line + 1 if event.start_mark else 1
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise SpecError([f"{filename}:{line}: YAML anchors and aliases are not allowed"])
        if count > MAX_EVENTS:
            raise SpecError([f"{filename}:{line}: too many entries (a build file has at most {MAX_COMMANDS} commands)"])


def _load(text: str) -> tuple[yaml.Node | None, Any]:
    """The composed tree (for line numbers) and the data built from it: one parse, not two."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def _yaml_error(exc: yaml.YAMLError, filename: str, text: str = "") -> str:
    mark = getattr(exc, "problem_mark", None)
    lines = text.rstrip("\n").splitlines()
    line = max(1, min(mark.line + 1 if mark is not None else 1, len(lines) or 1))  # "end of file" → the last line
    column = mark.column + 1 if mark is not None and mark.line + 1 == line else None
    problem = getattr(exc, "problem", None) or str(exc)
    if problem.startswith("mapping values are not allowed") and lines:
        column, problem = _colon_hint(lines[line - 1], column)
    else:
        for parser_words, plain in _YAML_WORDS:
            problem = problem.replace(parser_words, plain)
    return f"{filename}:{line}: malformed YAML" + (f" at column {column}" if column else "") + f": {problem}"


def _colon_hint(line: str, column: int | None) -> tuple[int | None, str]:
    """Where the first ': ' of a value is, and the value written in quotes, so that YAML reads it as
    text rather than as a key (``- sh -c 'echo "m2.cu(12): error"'`` is a mapping to YAML)."""
    body = line.lstrip(" ")
    start = len(line) - len(body)
    lead = ""
    if body.startswith("- "):
        lead = "- "
    elif ": " in body and not body.startswith(("'", '"')):  # key: value, the value holding another ': '
        lead = body[: body.index(": ") + 2]
    value_at = start + len(lead) + len(body[len(lead) :]) - len(body[len(lead) :].lstrip(" "))
    value = line[value_at:].rstrip()
    if ": " in value:
        column = value_at + value.index(": ") + 1
    if "'" not in value:
        quoted = f"'{value}'"
    elif '"' not in value and "\\" not in value:
        quoted = f'"{value}"'
    else:
        quoted = "'" + value.replace("'", "''") + "' (inside '…' a ' is written '')"
    return column, f"a ': ' inside a value makes YAML read it as a key; put the whole value in quotes: {lead}{quoted}"


# the parser's own terms, in words a student knows
_YAML_WORDS = [
    ("expected <block end>, but found '<block mapping start>'", "a key is indented differently from the keys around it"),
    ("expected <block end>, but found '<block sequence start>'", "a list item is indented differently from the items around it"),
    ("expected <block end>, but found '<scalar>'", "a line is indented differently from the lines around it"),
    ("expected <block end>, but found '-'", "a list item ('- ') is indented differently from the items around it"),
    ("mapping values are not allowed here", "a ': ' in a value (put the whole value in quotes)"),
    ("mapping values are not allowed in this context", "a ': ' in a value (put the whole value in quotes)"),
    ("did not find expected key", "a line is indented differently from the lines around it, or a ':' is missing"),
    ("found character that cannot start any token", "a character that cannot start a value here (a tab? indent with spaces)"),
    ("did not find expected '-' indicator", "a list item is indented differently from the items around it"),
    ("found character '\\t' that cannot start any token", "a tab character (indent with spaces)"),
    ("found character '\t' that cannot start any token", "a tab character (indent with spaces)"),
    ("<block end>", "the end of the indented block"),
    ("<block mapping start>", "a key"),
    ("<block sequence start>", "a list"),
    ("<scalar>", "a value"),
    ("<stream end>", "the end of the file"),
    ("<document start>", "'---'"),
    ("<flow mapping end>", "'}'"),
    ("<flow sequence end>", "']'"),
]


MAX_NESTING = 32


def _check_nesting(text: str, filename: str) -> None:
    """Refuse deep nesting before any YAML parser sees it: PyYAML takes minutes over '[' nested
    thousands deep (one line of 32,000 '[' then 32,000 ']' cost 58 s), and overflows its recursion
    (libyaml crashes) on '- - - …'. Flow depth is counted at every character, not at line ends,
    so brackets closed on the same line count too. The count is deliberately blunt (brackets in
    quoted commands count as well): no real build file comes near."""
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
                if depth > 2 * MAX_NESTING:
                    break
            elif ch in "]}" and depth:
                depth -= 1
        if compact > MAX_NESTING or depth > 2 * MAX_NESTING:
            raise SpecError([f"{filename}:{lineno}: nested too deeply (nesting is limited to {MAX_NESTING} levels)"])


def parse_spec(data: bytes | str, filename: str = SPEC_FILENAME) -> BuildSpec:
    """Parse and validate a student's build file; raise SpecError with line-numbered messages."""
    return _parse(data, filename, BuildSpec)


_Spec = TypeVar("_Spec", bound=BuildSpec)


def _parse(data: bytes | str, filename: str, model: type[_Spec]) -> _Spec:
    """Parse and validate a build file (``model``: BuildSpec, or CourseSpec for the course's);
    raise SpecError with line-numbered messages."""
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
        _check_events(text, filename)
        node, raw = _load(text)
    except yaml.YAMLError as exc:
        raise SpecError([_yaml_error(exc, filename, text)]) from None
    except RecursionError:
        raise SpecError([f"{filename}: nested too deeply (nesting is limited to {MAX_NESTING} levels)"]) from None
    if raw is None:
        raise SpecError([f"{filename}:1: the file is empty; it needs 'rai:' and 'commands:' sections"])
    if not isinstance(raw, dict):
        raise SpecError([f"{filename}:1: the top level must be a mapping with 'rai:' and 'commands:'"])
    if model is BuildSpec and isinstance(raw, dict) and "ranked" in raw:
        raise SpecError(
            [
                f"{filename}:{_line_of(node, ('ranked',))}: 'ranked' belongs to the course's build file, "
                "which instructors install on the server; remove it from yours"
            ]
        )
    try:
        spec = model.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(_messages(exc.errors(), node, filename)) from None
    joined = _joined_commands(node, text, filename)
    if joined:
        raise SpecError(joined)
    return spec


def _messages(errors: list[Any], node: Any, filename: str) -> list[str]:
    """The validation errors as people read them; a misspelt field is one error, with what was
    meant ("comands" is not also "commands is required")."""
    missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing" and e["loc"]}
    meant: dict[int, str] = {}
    for i, err in enumerate(errors):
        if err["type"] == "extra_forbidden" and err["loc"]:
            where = tuple(err["loc"][:-1])
            names = _field_names(where) | {str(m[-1]) for m in missing if m[:-1] == where}
            close = difflib.get_close_matches(str(err["loc"][-1]), sorted(names), n=1, cutoff=0.75)
            if close:
                meant[i] = close[0]
    said = {(*errors[i]["loc"][:-1], name) for i, name in meant.items()}
    out = []
    for i, err in enumerate(errors):
        if err["type"] == "missing" and tuple(err["loc"]) in said:
            continue  # said with the misspelling that meant it
        text = _message(err, node, filename)
        out.append(text + (f"; did you mean '{meant[i]}'?" if i in meant else ""))
    return out


def _field_names(loc: tuple[Any, ...]) -> set[str]:
    """The fields a build file may have at ``loc`` (a mapping's place), for "did you mean"."""
    model: Any = CourseSpec
    for part in loc:
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return set()
        model = field.annotation
    return set(model.model_fields)


def _joined_commands(node: Any, text: str, filename: str) -> list[str]:
    """A '- cmd' line indented deeper than the list's items is no item of its own: YAML joins it to
    the command above ('echo a - echo b'), which then runs and succeeds. Refused, with the line to write."""
    build = _child(_child(node, "commands"), "build")
    if not isinstance(build, yaml.SequenceNode):
        return []
    lines = text.splitlines()
    problems = []
    for item in build.value:
        plain = item.style in (None, "") if isinstance(item, yaml.ScalarNode) else False  # libyaml says '', PyYAML None
        if not plain or item.start_mark.line == item.end_mark.line:
            continue
        dash = max(item.start_mark.column - 2, 0)
        for n in range(item.start_mark.line + 1, min(item.end_mark.line + 1, len(lines))):
            body = lines[n].lstrip(" ")
            if body.startswith("- "):
                problems.append(
                    f"{filename}:{n + 1}: this '- ' line is indented deeper than the commands above it, so YAML joined it "
                    f"to the command before ('{item.value[:60]}'); indent it as they are: {' ' * dash}{body.rstrip()}"
                )
    return problems


def _child(node: Any, key: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        return next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    return None


def _message(err: Any, node: Any, filename: str) -> str:
    """One validation error as a person reads it: the file's line, the field's place, what is wrong."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    dotted = _where(loc)
    human = _HUMAN.get(err["type"])
    if human is None:  # our own sentence: after a colon
        human = ": " + err["msg"].removeprefix("Value error, ")
        dotted = dotted.rstrip()
    human = _refined(err, loc, human)
    line = _line_of(node, loc, at_key=err["type"] == "extra_forbidden")
    return f"{filename}:{line}: {dotted}{'' if human.startswith(':') else ' '}{human}"


def _refined(err: Any, loc: tuple[Any, ...], human: str) -> str:
    """pydantic's words made specific: bounds with their value, and what YAML made of a command."""
    kind, ctx, given = err["type"], err.get("ctx"), err.get("input")
    if kind == "list_type" and loc and loc[-1] != "build":
        return "must be a list"
    if kind in ("less_than_equal", "greater_than_equal", "greater_than") and ctx:
        bound = next(iter(ctx.values()))
        return {
            "less_than_equal": f"must be at most {bound}",
            "greater_than_equal": f"must be at least {bound}",
            "greater_than": f"must be more than {bound}",
        }[kind]
    if kind == "too_long" and ctx:
        return f"must have at most {ctx.get('max_length')} entries"
    if kind != "string_type":
        return human
    if isinstance(given, dict):
        return human + " (YAML read it as a mapping because it contains ': '; put the whole command in quotes)"
    if given is None:
        return "is empty (nothing after the '- '); write the command or remove the line"
    if isinstance(given, (bool, int, float)):
        return f"was read as {_read_as(given)}; put it in quotes if it is meant as text"
    return human


def parse_course_spec(data: bytes | str, filename: str = "course build file") -> CourseSpec:
    return _parse(data, filename, CourseSpec)


def load_spec(project_dir: Path) -> BuildSpec:
    """Read ``rai_build.yml`` from a project folder."""
    path = project_dir / SPEC_FILENAME
    if not path.is_file():
        raise SpecError([no_spec(path)])
    return parse_spec(path.read_bytes(), filename=SPEC_FILENAME)
