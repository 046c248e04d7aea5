"""The client answers --help and version without its heavy libraries, and its short help is the
full command line's."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("typer", "rich", "httpx", "pydantic", "click")


def _modules_after(args: list[str], env: dict | None = None) -> tuple[str, set[str]]:
    code = ("import sys\nfrom raiclient.entry import main\n"
            f"main(['raiclient', *{args!r}])\n"
            "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
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


def test_other_commands_still_reach_the_full_cli(tmp_path):
    res = subprocess.run([sys.executable, "-m", "raiclient", "submit", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "--path" in res.stdout
