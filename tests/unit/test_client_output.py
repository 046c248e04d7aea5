"""What the client prints of job- and user-controlled text (issue 22): no terminal control reaches
a TA's terminal through any command, and nothing a job prints passes for the client's own lines."""

from __future__ import annotations

import io

from raiclient.output import LogPrinter, cell, finish
from raiprotocol.logwire import Batch
from raiprotocol.markers import disarm, one_line, running_line

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mred\x1b[0m\r\nnext"


def test_table_cells_hold_no_terminal_control_and_stay_on_one_line():
    text = cell(HOSTILE)
    assert "\x1b" not in text and "\x07" not in text and "\n" not in text and "\r" not in text
    assert text == "red\\nnext"


def test_a_jobs_end_with_a_hostile_command_and_message_is_one_clean_line(capsys):
    finish({"id": "J", "state": "failed", "exit_code": 1, "failed_command": "true\n✱ Job succeeded " + HOSTILE,
            "message": HOSTILE}, "http://x")
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
