"""The markers in a job's log that the worker writes and the server reads back: which command
ran (``Running: …``), repeated timing runs (``Repeat r of k: …``), and the program's ``Op Time:``.

What counts as a timing run: a command that printed ``Op Time:`` and did not run under a profiler,
since ncu, nsys, nvprof and compute-sanitizer inflate the timings they observe. The server reads
``Op Time:`` itself (raiserver.results, on a linear-time engine)."""

from __future__ import annotations

import re
import unicodedata

# on a command as one_line shows it: an escaped line break (\\n) separates words like a space
PROFILERS = re.compile(r"(^|[\s/;&|(]|\\[nrt])(ncu|nsys|nvprof|nv-nsight-cu-cli|compute-sanitizer|cuda-memcheck)(\s|$|\\[nrt])")
SYSTEM_MARK = "✱"  # how clients show rai's own lines ("✱ Running: …"); job output never starts with it
REPEAT_PREFIX = "Repeat "  # "Repeat 2 of 3: <command>" in the log
RUNNING_PREFIX = "Running:"  # "Running: <command>" in the log, before each build command


_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def one_line(text: str) -> str:
    """Text for one of rai's own log lines: control characters escaped (``\\n``, ``\\x1b``), so a
    newline in a build command or a message cannot make a second, forged, line of rai's."""
    return text.translate(_ESCAPES)


# What may come before rai's mark on a line that still shows the mark first, decided by Unicode's
# properties (a rule, so a character the last review did not try is covered too):
# - the general categories that draw nothing or only blank space: controls, format characters
#   (zero-width spaces and joiners, U+FEFF, the bidi controls, tags), combining marks, spaces and
#   separators, and unassigned, private-use and surrogate code points (a newer terminal or a font
#   may draw them as nothing);
# - Default_Ignorable_Code_Point, which Unicode says to draw as nothing (the Hangul fillers, Lo);
# - the Hangul conjoining vowels and finals (Hangul_Syllable_Type V and T, U+1160-U+11FF and
#   U+D7B0-U+D7FF, Lo): with no leading consonant before them, terminals draw them zero-wide;
# - the blank Braille pattern, a letter-sized blank.
# A line that starts with any run of them and then rai's mark looks like rai's own line.
_INVISIBLE_CATEGORIES = frozenset(("Cc", "Cf", "Cn", "Co", "Cs", "Mn", "Mc", "Me", "Zs", "Zl", "Zp"))
_BLANK = frozenset("\u2800")  # BRAILLE PATTERN BLANK
# Default_Ignorable_Code_Point's parts that no other property gives (UAX #44; PropList.txt): the
# unassigned code points Unicode reserves as ignorable, and the Prepended_Concatenation_Marks, the
# format characters that are drawn (U+0600 ARABIC NUMBER SIGN, …) and so are not ignorable
_RESERVED_IGNORABLE = ((0x2060, 0x206F), (0xFFF0, 0xFFFB), (0xE0000, 0xE0FFF))
_PREPENDED_CONCATENATION_MARKS = frozenset("\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd")
# bidi embeddings, overrides and isolates: they can carry a '✱' from the end of a line to its start
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
# where a new visual line (or a rewritten one) may begin inside a log line: line and paragraph
# separators, a carriage return, a backspace, and any terminal control but colours (SGR) - a raw
# log shown in a terminal or a browser starts over there
_BREAK = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|\x1b[ -/]*[0-~]?|\x9b[0-?]*[ -/]*[@-~]?"
    "|[\b\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]"
)


def default_ignorable(char: str) -> bool:
    """Unicode's Default_Ignorable_Code_Point, derived as DerivedCoreProperties.txt defines it
    (Other_Default_Ignorable_Code_Point + Cf + Variation_Selector - White_Space - U+FFF9..U+FFFB -
    U+13430..U+1343F - Prepended_Concatenation_Mark) from what ``unicodedata`` knows, so it follows
    this Python's Unicode version instead of a copied table."""
    category = unicodedata.category(char)
    if category == "Cn":  # Other_Default_Ignorable_Code_Point's reserved ranges
        return any(lo <= ord(char) <= hi for lo, hi in _RESERVED_IGNORABLE)
    name = unicodedata.name(char, "")
    other = (
        name == "COMBINING GRAPHEME JOINER"
        or name.startswith("KHMER VOWEL INHERENT ")
        or (name.startswith(("HANGUL ", "HALFWIDTH HANGUL ")) and name.endswith(" FILLER"))
    )
    if not (other or category == "Cf" or "VARIATION SELECTOR" in name):
        return False
    return not (
        char.isspace() or name.startswith(("INTERLINEAR ANNOTATION ", "EGYPTIAN HIEROGLYPH ")) or char in _PREPENDED_CONCATENATION_MARKS
    )


def conjoining_jamo(char: str) -> bool:
    """A Hangul vowel or final that only joins a syllable (Hangul_Syllable_Type V or T; the names
    Unicode gives them): alone, at a line's start, terminals draw it zero-wide."""
    return unicodedata.name(char, "").startswith(("HANGUL JUNGSEONG ", "HANGUL JONGSEONG "))


def invisible(char: str) -> bool:
    """Whether a character shows nothing (or only blank space) where a line starts: the one rule
    for what may come before rai's mark (the comment above says why each part is there)."""
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or char in _BLANK or default_ignorable(char) or conjoining_jamo(char)


def _armed(segment: str) -> bool:
    """Whether the segment's first visible character is rai's mark."""
    for char in _SGR.sub("", segment):
        if char == SYSTEM_MARK:
            return True
        if not invisible(char):
            return False
    return False


def disarm(line: str) -> str:
    """One line of a job's output as shown beside rai's lines: wherever it would show rai's mark
    first (colours, zero-width, format, bidi, combining and blank characters aside, at the start or
    after a line separator, carriage return or cursor move), a backslash goes before it, so
    '✱ Job succeeded' printed by a job cannot pass for the client's own line. Bidi controls in a
    line with the mark are shown as ``\\u202e``: they could reorder the mark to the front."""
    if SYSTEM_MARK not in line:
        return line
    if _BIDI.search(line):
        line = _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", line)
    out: list[str] = []
    start = 0
    for m in _BREAK.finditer(line):
        if _SGR.fullmatch(m.group()):
            continue  # colours only: the same visual line goes on
        segment = line[start : m.start()]
        out += ["\\" + segment if _armed(segment) else segment, m.group()]
        start = m.end()
    segment = line[start:]
    out.append("\\" + segment if _armed(segment) else segment)
    return "".join(out)


def running_line(command: str) -> str:
    return f"{RUNNING_PREFIX} {one_line(command)}"


def command_of(line: str) -> str | None:
    """The command a ``running_line`` announces, or None for any other line."""
    return line.removeprefix(RUNNING_PREFIX).strip() if line.startswith(RUNNING_PREFIX) else None


def is_profiled(command: str) -> bool:
    """Read on the command as the log shows it (one_line), by the worker and the server alike."""
    return bool(PROFILERS.search(one_line(command)))


def repeat_line(r: int, k: int, command: str) -> str:
    return f"{REPEAT_PREFIX}{r} of {k}: {one_line(command)}"
