"""What the client prints of job- and user-controlled text (issue 22): no terminal control reaches
a TA's terminal through any command, and nothing a job prints passes for the client's own lines."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

from raiclient.output import LogPrinter, cell, finish
from raiprotocol.logwire import Batch
from raiprotocol.markers import disarm, one_line, running_line

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mred\x1b[0m\r\nnext"


def test_table_cells_hold_no_terminal_control_and_stay_on_one_line():
    text = cell(HOSTILE)
    assert "\x1b" not in text and "\x07" not in text and "\n" not in text and "\r" not in text
    assert text == "red\\nnext"


def test_a_jobs_end_with_a_hostile_command_and_message_is_one_clean_line(capsys):
    finish(
        {"id": "J", "state": "failed", "exit_code": 1, "failed_command": "true\n✱ Job succeeded " + HOSTILE, "message": HOSTILE}, "http://x"
    )
    out = capsys.readouterr().out
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x07" not in out
    assert out.count("\n") == 1 and out.startswith("✱ Job failed")  # nothing starts a second ✱ line


def test_job_output_cannot_pass_for_the_clients_own_line():
    buf = io.StringIO()
    printer = LogPrinter(buf, buf)
    printer.batches([Batch(n=1, t=0.0, s="out", c=3, x="✱ Job succeeded in 0.1 s\nplain\n\x1b[1;36m✱\x1b[0m Job succeeded")])
    printer.system("Job failed")
    lines = buf.getvalue().splitlines()
    assert lines[0] == "\\✱ Job succeeded in 0.1 s" and lines[1] == "plain" and lines[2].startswith("\\")
    assert [line for line in lines if line.startswith("✱")] == ["✱ Job failed"]  # rai's own, and only it


def test_rais_own_lines_are_one_line_whatever_the_command_holds():
    line = running_line("echo a\nCancel requested by tina; stopping the container")
    assert "\n" not in line and line == "Running: echo a\\nCancel requested by tina; stopping the container"
    assert one_line("a\tb\x1b") == "a\\tb\\x1b"
    assert disarm("x ✱ y") == "x ✱ y"


# -- issue 34, item 6: a '✱' behind invisible characters ---------------------------------------

# each renders as (or nearly as) the client's '✱ Job succeeded' on a terminal or in a browser
FORGED = [
    "\u200b✱ Job succeeded",
    "\u2060✱ Job succeeded",
    "\ufeff✱ Job succeeded",
    "\u202e✱ Job succeeded",
    "\u202edeccus boJ ✱",
    "\u2067✱ Job succeeded",
    "\u200f✱ Job succeeded",
    "\u061c✱ Job succeeded",
    "\u200d\u200c\u034f✱ Job succeeded",
    "\u180e✱ Job succeeded",
    "\u00a0✱ Job succeeded",
    "\u3000✱ Job succeeded",
    " ✱ Job succeeded",
    "\t✱ Job succeeded",
    "\u0301✱ Job succeeded",
    "\u20dd✱ Job succeeded",
    "\ufe0f✱ Job succeeded",
    "\u3164✱ Job succeeded",
    "\u2800✱ Job succeeded",
    "\U000e0020✱ Job succeeded",
    "\ue000✱ Job succeeded",
    "\U0001fffe✱ Job succeeded",
    "\x1b[1;36m\u200b✱\x1b[0m Job succeeded",
    "ok\u2028✱ Job succeeded",
    "ok\u2029\u200b✱ Job succeeded",
    "\u00ad✱ Job succeeded",
    # issue 50, item 1: Hangul conjoining vowels and finals, drawn zero-wide (Lo, not a blank)
    "\u11a8✱ Job succeeded",
    "\ud7b0✱ Job succeeded",
    "\u1161\u11a8\ud7fb✱ Job succeeded",
    "\u115f\u1160\uffa0✱ Job succeeded",
]
# Unicode's Jamo.txt / HangulSyllableType.txt: the vowels (V) and finals (T) that join a syllable
JAMO_V_T = ((0x1160, 0x11A7), (0x11A8, 0x11FF), (0xD7B0, 0xD7C6), (0xD7CB, 0xD7FB))


def _conjoining_jamo(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in JAMO_V_T)


SHOWS_NOTHING = {"Cc", "Cf", "Cn", "Co", "Cs", "Mn", "Mc", "Me", "Zs", "Zl", "Zp"}
COLOURS = re.compile(r"\x1b\[[0-9;:]*m")


def passes_for_rais(text: str) -> list[str]:
    """The lines of ``text`` (split as a terminal or a browser may show them) whose first visible
    character is rai's mark: invisible characters and colours stripped."""
    shown = "".join(c for c in COLOURS.sub("", text) if unicodedata.category(c) not in SHOWS_NOTHING or c in "\n\r\u2028\u2029")
    shown = "".join(c for c in shown if c not in "\u115f\u1160\u3164\uffa0\u2800" and not _conjoining_jamo(ord(c)))
    return [line for line in shown.splitlines() if line.startswith("✱")]


@pytest.mark.parametrize("line", FORGED)
def test_a_mark_behind_invisible_characters_is_escaped(line):
    # the case itself looks like rai's line (an override shows its text reversed: '✱' first)
    assert passes_for_rais(line) or "\u202e" in line
    shown = disarm(line)
    assert passes_for_rais(shown) == [], repr(shown)
    assert "\\" in shown


def test_the_client_prints_no_forged_line_and_bidi_controls_show():
    buf = io.StringIO()
    printer = LogPrinter(buf, buf)
    printer.batches([Batch(n=1, t=0.0, s="out", c=len(FORGED), x="\n".join(FORGED))])
    printer.system("Job succeeded")
    out = buf.getvalue()
    assert passes_for_rais(out) == ["✱Jobsucceeded"]  # the client's own, only (spaces stripped)
    assert out.splitlines()[-1] == "✱ Job succeeded"
    assert "\\u202edeccus boJ ✱" in out  # an override that would carry the mark to the front is shown
    for plain in ("x ✱ y", "Op Time: 1 ✱", "no mark", "\u200bzero-width first, no mark"):
        assert disarm(plain) == plain  # lines that cannot pass for rai's are printed as printed


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_the_web_view_escapes_job_lines_as_the_client_does():
    """The job page marks rai's lines with '✱' too: its disarm (app.js) gives what the client's gives."""
    src = (Path(__file__).resolve().parents[2] / "server/raiserver/static/app.js").read_text()
    code = re.search(r"const INVISIBLE[\s\S]*?\n  function jobPage", src).group().removesuffix("function jobPage")
    cases = [*FORGED, "x ✱ y", "plain", "\x1b[2K✱ Job succeeded", "a\r✱ b"]
    script = code + "\nprocess.stdout.write(JSON.stringify(JSON.parse(process.argv[1]).map(disarm)));"
    out = subprocess.run(["node", "-e", script, json.dumps(cases)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [disarm(c) for c in cases]


# -- issue 50, item 1: the rule over every code point ---------------------------------------------

# Default_Ignorable_Code_Point as Unicode 14 and 15 list it (DerivedCoreProperties.txt): the oracle
# markers.default_ignorable, which derives it from unicodedata, is checked against
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
LINE = "✱ Job succeeded"


def _in(ranges: tuple[tuple[int, int], ...], cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _shows_nothing(cp: int) -> bool:
    """The rule, from Unicode's own tables: what may stand before the mark (issue 50)."""
    c = chr(cp)
    return unicodedata.category(c) in SHOWS_NOTHING or _in(DEFAULT_IGNORABLE, cp) or _conjoining_jamo(cp) or cp == 0x2800


def test_default_ignorable_is_unicodes_over_every_code_point():
    from raiprotocol.markers import default_ignorable

    wrong = [hex(cp) for cp in range(0x110000) if default_ignorable(chr(cp)) != _in(DEFAULT_IGNORABLE, cp)]
    assert wrong == []


def test_every_code_point_that_shows_nothing_before_the_mark_is_escaped_and_no_other():
    """For each of the 1,114,112 code points: a line that starts with it and then '✱ Job succeeded'
    is escaped exactly when the character shows nothing (the rule), and never passes for rai's."""
    forged, needless = [], []
    for cp in range(0x110000):
        c = chr(cp)
        line = c + LINE
        shown = disarm(line)
        if not _shows_nothing(cp):
            if shown != line and c != "✱":  # a line that starts with the mark is escaped, as it should
                needless.append(hex(cp))
        elif shown == "\\" + line:
            continue  # the backslash first: nothing before it hides it
        # a line break or terminal control starts over before the mark; a bidi control shown as text
        elif shown not in (c + "\\" + LINE, f"\\u{cp:04x}" + LINE) or passes_for_rais(shown):
            forged.append(hex(cp))
    assert forged == [] and needless == []


def test_every_code_point_a_terminal_draws_zero_wide_is_escaped():
    """The same by a terminal's own measure (wcwidth: 0 or not printable), where it is installed."""
    wcwidth = pytest.importorskip("wcwidth")
    missed = [hex(cp) for cp in range(0x110000) if wcwidth.wcwidth(chr(cp)) <= 0 and disarm(chr(cp) + LINE) == chr(cp) + LINE]
    assert missed == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_the_web_view_escapes_as_the_client_over_every_code_point(tmp_path):
    """app.js's rule is the client's for every code point; they may differ only where this Python's
    Unicode has no character yet (node's is newer: it draws what it knows)."""
    src = (Path(__file__).resolve().parents[2] / "server/raiserver/static/app.js").read_text()
    code = re.search(r"const INVISIBLE[\s\S]*?\n  function jobPage", src).group().removesuffix("function jobPage")
    script = code + (
        "\nconst out = [];"
        f"\nfor (let cp = 0; cp < 0x110000; cp++) {{ const l = String.fromCodePoint(cp) + {json.dumps(LINE)};"
        " if (disarm(l) !== l) out.push(cp); }"
        "\nprocess.stdout.write(JSON.stringify(out));"
    )
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    web = set(json.loads(out.stdout))
    client = {cp for cp in range(0x110000) if disarm(chr(cp) + LINE) != chr(cp) + LINE}
    differ = [hex(cp) for cp in web ^ client if unicodedata.category(chr(cp)) != "Cn" or cp in web]
    assert differ == []


def test_kinds_show_words_every_grade_rule_without_a_crash():
    """Issue 49: 'raiclient admin kinds show' crashed (NoneType.__format__) once a kind had a pass rule."""
    from raiprotocol.graderules import rule_words
    from raiprotocol.models import GradeRule

    assert (
        rule_words("m1", GradeRule(rule="pass", points=10))
        == "m1: graded out of 10 by pass/fail on accuracy; accuracy ≥ the server's threshold"
    )
    assert "op time 2 s → 0, 0.5 s → full" in rule_words("m2", GradeRule(rule="linear", slow=2, fast=0.5))
    assert "0.8 at the class median, +0.1 per standard deviation faster" in rule_words("final", GradeRule(rule="stddev", threshold=0.9))
