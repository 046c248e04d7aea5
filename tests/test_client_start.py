"""The client answers --help and version, and runs a submit, without its heavy libraries; one
command-line definition (``commands.py``, argparse) is the help, the parser and the completion, and
every student command runs on the standard library (issue 49)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("typer", "rich", "httpx", "pydantic", "click")


def _modules_after(args: list[str], env: dict | None = None) -> tuple[str, set[str]]:
    code = (
        "import sys\nfrom raiclient.entry import main\n"
        f"try:\n    main(['raiclient', *{args!r}])\nexcept SystemExit as e:\n    print('EXIT', e.code)\n"
        "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    text, _, mods = res.stdout.rpartition("MODULES ")
    return text, set(mods.split())


@pytest.mark.parametrize("args", [[], ["--help"], ["-h"], ["version"], ["--version"]])
def test_help_and_version_import_no_heavy_library(args, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(tmp_path / "none")}
    text, mods = _modules_after(args, env)
    assert not mods & set(HEAVY), mods & set(HEAVY)
    if "version" in " ".join(args):
        assert text.startswith("raiclient ")
    else:
        assert "Commands:" in text and "submit" in text


def test_version_asks_the_server_named_by_the_profile(tmp_path, process_service):
    rai = process_service
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    text, mods = _modules_after(["version"], env)
    assert "raiserver" in text and rai.url in text
    assert not mods & set(HEAVY)


def test_version_of_an_unreachable_server_says_so(tmp_path):
    profile = tmp_path / "p"
    profile.write_text("profile:\n  access_key: a\n  secret_key: b\nserver: http://127.0.0.1:9\n")
    text, _ = _modules_after(["version"], {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(profile)})
    assert "server http://127.0.0.1:9: not reachable" in text


def _leaves(parser=None, path=()):
    """Every command of the one definition that runs: (words, its parser's defaults)."""
    import argparse

    from raiclient.commands import build

    parser = parser or build()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub.get_default("run"):
                    yield (*path, name), sub
                else:
                    yield from _leaves(sub, (*path, name))


def test_the_help_lists_every_command_and_each_runs_a_function_that_exists():
    """Issue 49: two parsers (entry.py by hand, cli.py with typer) were kept in step by tests; now
    the help lists the commands of the one definition, and each names a function that is there."""
    import importlib

    from raiclient.commands import build

    top = build().format_help()
    leaves = dict(_leaves())
    student = ["submit", "logs", "status", "queue", "images", "history", "download", "ranking", "kinds", "limits"]
    student += ["cancel", "delete", "regrade", "regrades", "login", "version", "completion"]
    assert {words[0] for words in leaves} == {*student, "admin"}
    for words, parser in leaves.items():
        assert f"\n  {words[0]} " in top, words
        module, _, function = parser.get_default("run").partition(":")
        assert callable(getattr(importlib.import_module(module), function)), words
        assert parser.get_default("needs") == (("pydantic",) if words[0] == "admin" else ()), words


def test_every_student_command_imports_only_the_standard_library_and_the_pyz_packages():
    """Issue 49: raiclient.pyz runs every student command; its modules import no typer, rich,
    httpx or pydantic (the pyz cannot carry them)."""
    student = sorted({p.get_default("run").partition(":")[0] for words, p in _leaves() if words[0] != "admin"})
    code = f"import importlib, sys\nfor m in {student!r}:\n    importlib.import_module(m)\nprint(' '.join(sorted(sys.modules)))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    loaded = {m.split(".")[0] for m in res.stdout.split()}
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_a_whole_submit_imports_no_heavy_library(tmp_path, process_service):
    from helpers import make_project

    rai = process_service
    proj = make_project(tmp_path / "p", ["echo Op Time: 0.25"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    text, mods = _modules_after(["submit", "-p", str(proj), "--kind=dev"], env)
    assert "✱ Job succeeded" in text and "EXIT 0" in text, text
    assert "Results\n  Op Time  0.25 s\n" in text, text
    assert not mods & set(HEAVY), mods & set(HEAVY)


def test_submit_options_parse_as_declared_and_mistakes_are_said():
    from raiclient.commands import build

    ns = build().parse_args(["submit", "-p", "x", "--kind=m1", "-d"])
    assert (ns.path, ns.kind, ns.detach, ns.queue, ns.server) == ("x", "m1", True, None, None)
    assert build().parse_args(["submit", "-dp", "x"]).path == "x"
    for odd in (["-p"], ["-p", "--kind"], ["--detach=yes"], ["extra"]):
        res = subprocess.run([sys.executable, "-m", "raiclient", "submit", *odd], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and "Usage: raiclient submit" in res.stderr and "Traceback" not in res.stderr, (odd, res.stderr)


def test_other_commands_still_reach_the_full_cli(tmp_path):
    res = subprocess.run([sys.executable, "-m", "raiclient", "submit", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "--path" in res.stdout


@pytest.mark.parametrize("command", [["submit"], ["logs"], ["admin", "roster"], ["delete"]])
def test_help_shows_no_value_after_a_flag(command):
    """Issue 26: `--detach -d <bool>` suggested that the flag takes a value."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "raiclient", *command, "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "Usage:" in out and "<bool>" not in out, out


def test_short_help_lists_the_options_of_the_whole_command_line():
    res = subprocess.run([sys.executable, "-m", "raiclient", "--help"], capture_output=True, text=True, timeout=60)
    for option in ("--color {auto,always,never}", "--show-completion [SHELL]", "--install-completion [SHELL]", "-h, --help"):
        assert option in res.stdout, (option, res.stdout)
    assert "Colour codes: auto (on a terminal, unless NO_COLOR is set), always, never" in " ".join(res.stdout.split())


def test_json_listings_import_no_heavy_library(tmp_path, process_service):
    """Issue 37: history/status/queue/images/ranking --json run on the standard library (scripts,
    and raiclient.pyz on a bare Python)."""
    rai = process_service
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    for args in (["history", "--json", "-n", "3"], ["queue", "--json"], ["ranking", "--json"], ["images", "--json"]):
        text, mods = _modules_after(args, env)
        assert text.lstrip().startswith("[") and "EXIT 0" in text, text
        assert not mods & set(HEAVY), (args, mods & set(HEAVY))


def test_logs_options_parse_as_declared_and_run_without_heavy_libraries(tmp_path, process_service):
    """Issue 37: `logs` runs on the standard library too (raiclient.pyz), your last job's without an id."""
    from helpers import make_project

    from raiclient.commands import build

    ns = build().parse_args(["logs", "J1", "-f", "--after", "4"])
    assert (ns.job_id, ns.follow, ns.after, ns.server) == ("J1", True, 4, None)
    assert build().parse_args(["logs"]).job_id is None
    for odd in (["a", "b"], ["--after", "x"], ["--after", "-1"], ["--follow=yes"]):
        res = subprocess.run([sys.executable, "-m", "raiclient", "logs", *odd], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and "Usage: raiclient logs" in res.stderr, (odd, res.stderr)
    rai = process_service
    proj = make_project(tmp_path / "p", ["echo logged"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    _modules_after(["submit", "-p", str(proj)], env)
    text, mods = _modules_after(["logs"], env)
    assert "logged" in text and "✱ Job succeeded" in text and "EXIT 0" in text, text
    assert not mods & set(HEAVY), mods & set(HEAVY)
