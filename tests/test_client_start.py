"""The client answers --help and version, and runs a submit, without its heavy libraries; its
short help and submit options are the full command line's."""

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


def test_short_help_lists_exactly_the_commands_of_the_full_cli():
    from typer.main import get_command

    from raiclient import cli, entry
    from raiclient.admin import admin

    app = cli.app
    if not any(g.name == "admin" for g in app.registered_groups):
        app.add_typer(admin, name="admin")
    group = get_command(app)
    full = {name: (cmd.help or "").strip().split("\n")[0] for name, cmd in group.commands.items()}
    assert full == entry.COMMANDS


def test_a_whole_submit_imports_no_heavy_library(tmp_path, process_service):
    from helpers import make_project

    rai = process_service
    proj = make_project(tmp_path / "p", ["echo Op Time: 0.25"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    text, mods = _modules_after(["submit", "-p", str(proj), "--kind=dev"], env)
    assert "✱ Job succeeded" in text and "EXIT 0" in text, text
    assert "Results\n  Op Time  0.25 s\n" in text, text
    assert not mods & set(HEAVY), mods & set(HEAVY)


def test_submit_options_read_at_the_start_are_the_full_commands():
    from typer.main import get_command

    from raiclient import cli, entry

    command = get_command(cli.app).commands["submit"]  # type: ignore[attr-defined]
    declared = {opt: (p.name, not p.is_flag) for p in command.params for opt in p.opts if p.name != "help"}
    assert declared == entry.SUBMIT_OPTIONS
    assert entry.submit_args(["-p", "x", "--kind=m1", "-d"]) == entry.SubmitArgs(path="x", kind="m1", detach=True)
    for odd in (["--help"], ["-p"], ["-p", "--kind"], ["--detach=yes"], ["extra"], ["-dp", "x"]):
        assert entry.submit_args(odd) is None, odd  # the full command line explains these


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


def test_the_full_cli_does_not_import_the_fast_entry_point():
    """Issue 37: cli.py and entry.py imported each other (hidden by a lazy import); both read the
    commands and the server's version from about.py now."""
    code = "import sys, raiclient.cli; print('raiclient.entry' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "False", res.stdout + res.stderr


def test_short_help_lists_exactly_the_options_of_the_full_cli():
    from typer.main import get_command

    from raiclient import cli, entry

    group = get_command(cli.app)
    full = {" ".join(p.opts) + (" [auto|always|never]" if p.name == "color" else ""): (p.help or "").strip() for p in group.params}
    full["--help"] = "Show this message and exit."
    assert full == entry.OPTIONS


def test_json_listings_import_no_heavy_library(tmp_path, process_service):
    """Issue 37: history/status/queue/images/ranking --json run on the standard library (scripts,
    and raiclient.pyz on a bare Python)."""
    rai = process_service
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    for args in (["history", "--json", "-n", "3"], ["queue", "--json"], ["ranking", "--json"], ["images", "--json"]):
        text, mods = _modules_after(args, env)
        assert text.lstrip().startswith("[") and "EXIT 0" in text, text
        assert not mods & set(HEAVY), (args, mods & set(HEAVY))


def test_logs_options_read_at_the_start_are_the_full_commands(tmp_path, process_service):
    """Issue 37: `logs` runs on the standard library too (raiclient.pyz); its options are cli.logs'."""
    from helpers import make_project
    from typer.main import get_command

    from raiclient import cli, entry

    command = get_command(cli.app).commands["logs"]  # type: ignore[attr-defined]
    declared = {opt: (p.name, not p.is_flag) for p in command.params for opt in p.opts if p.name not in ("help", "job_id")}
    assert declared == entry.LOGS_OPTIONS
    assert entry.logs_args(["J1", "-f", "--after", "4"]) == {"job_id": "J1", "follow": True, "after": 4, "server": None}
    for odd in (["--help"], ["a", "b"], ["--after", "x"], ["--follow=yes"]):
        assert entry.logs_args(odd) is None, odd
    rai = process_service
    proj = make_project(tmp_path / "p", ["echo logged"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAI_PROFILE": str(rai.profile)}
    _modules_after(["submit", "-p", str(proj)], env)
    text, mods = _modules_after(["logs"], env)
    assert "logged" in text and "✱ Job succeeded" in text and "EXIT 0" in text, text
    assert not mods & set(HEAVY), mods & set(HEAVY)
