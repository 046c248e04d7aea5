"""Shell completion from the one command-line definition (``commands.py``), on the standard
library: the scripts for bash, zsh and fish, and the answers they ask for. The shell runs the
client with ``_RAICLIENT_COMPLETE=complete_SHELL``, ``COMP_WORDS`` (the line) and ``COMP_CWORD``
(the word being completed), the protocol the typer-made scripts used, so those keep working.

Commands, options and choices complete from the definition; ``--kind`` and a kind argument from
the server's kinds, a job argument from your recent jobs (each a short call; nothing when the
server does not answer in 2 s); files and folders from the shell itself (``__files__``)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from .commands import SHELLS, build

FILES = "__files__"  # the shell completes a file name here
FILE_DESTS = {"path", "output", "out", "csv_file", "tar", "build_file", "labels", "starter"}

BASH = """_raiclient_completion() {
    local IFS=$'\\n'
    local reply
    reply=( $( env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD _RAICLIENT_COMPLETE=complete_bash RUNNER ) )
    if [[ "${reply[0]}" == "__files__" ]]; then
        COMPREPLY=( $(compgen -f -- "${COMP_WORDS[COMP_CWORD]}") )
        compopt -o filenames 2>/dev/null
    else
        COMPREPLY=( "${reply[@]}" )
    fi
    return 0
}
complete -F _raiclient_completion raiclient
"""
ZSH = "autoload -U +X bashcompinit && bashcompinit\n" + BASH
FISH = """function __raiclient_complete
    set -l reply (env COMP_WORDS=(commandline -cp) _RAICLIENT_COMPLETE=complete_fish RUNNER)
    if test "$reply[1]" = __files__
        __fish_complete_path (commandline -ct)
    else
        printf '%s\\n' $reply
    end
end
complete -c raiclient -f -a '(__raiclient_complete)'
"""


def _runner() -> str:
    """How the script runs this client: the one file by its full path, else the command typed ($1)."""
    me = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if me is not None and me.suffix == ".pyz":
        return f"{shlex.quote(sys.executable)} {shlex.quote(str(me.resolve()))}"
    return "$1"


def text(shell: str | None) -> str:
    """The completion script for ``shell`` (default: $SHELL's)."""
    name = shell or Path(os.environ.get("SHELL", "bash")).name
    if name not in SHELLS:
        raise ValueError(f"completion is for {', '.join(SHELLS)}, not {name!r}")
    body = {"bash": BASH, "zsh": ZSH, "fish": FISH}[name]
    runner = _runner()
    return body.replace("RUNNER", runner if name != "fish" or runner != "$1" else "raiclient")


def show(shell: str | None) -> int:
    """``raiclient completion [SHELL]`` and ``--show-completion [SHELL]``: the script on stdout."""
    from .output import error

    try:
        sys.stdout.write(text(shell or None))
    except ValueError as exc:
        error(str(exc))
        return 2
    return 0


def script(args: argparse.Namespace) -> int:
    return show(args.shell)


def install(shell: str | None) -> int:
    """``--install-completion [SHELL]``: the script where the shell reads it at start."""
    from .output import error, say

    name = shell or Path(os.environ.get("SHELL", "bash")).name
    try:
        body = text(name)
    except ValueError as exc:
        error(str(exc))
        return 2
    home = Path.home()
    if name == "fish":
        dest = home / ".config" / "fish" / "completions" / "raiclient.fish"
        rc = None
    else:
        dest = home / ".config" / "raiclient" / f"completion.{name}"
        rc = home / (".bashrc" if name == "bash" else ".zshrc")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(body)
    if rc is not None:
        line = f"source {shlex.quote(str(dest))}"
        if line not in (rc.read_text() if rc.exists() else ""):
            with rc.open("a") as fh:
                fh.write(f"\n{line}\n")
    say(f"{name} completion installed in {dest}" + (f" (read by {rc})" if rc else "") + "; open a new shell to use it")
    return 0


def _server_values(what: str) -> list[str]:
    """Kind names or your recent job ids, from the server; none when it does not answer soon."""
    try:
        from raiprotocol.profile import load_profile

        from .transport import Http

        conn = Http(load_profile(None), timeout=2.0)
    except Exception:  # noqa: BLE001 - no profile: nothing to offer
        return []
    try:
        if what == "kinds":
            return [str(k["name"]) for k in conn.json("GET", "/api/v1/kinds")["kinds"]]
        return [str(j["id"]) for j in conn.json("GET", "/api/v1/jobs", params={"limit": 20})["jobs"]]
    except Exception:  # noqa: BLE001
        return []
    finally:
        conn.close()


def _values(action: argparse.Action) -> list[str]:
    how = getattr(action, "complete", None)
    if how == "shells":
        return list(SHELLS)
    if how in ("kinds", "jobs"):
        return _server_values(how)
    if action.choices:
        return [str(c) for c in action.choices]
    if action.dest in FILE_DESTS:
        return [FILES]
    return []


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def candidates(words: list[str], cword: int) -> list[str]:
    """What may come at word ``cword`` of ``words`` (the first is the command itself)."""
    current = words[cword] if cword < len(words) else ""
    before = words[1:cword]
    if current == "=":  # bash splits --kind=m on '=': complete the option's value
        current = ""
    elif len(before) >= 1 and before[-1] == "=":
        before = before[:-1]
    parser = build()
    expecting: argparse.Action | None = None
    positional = 0
    for word in before:
        if expecting is not None:
            expecting = None
            continue
        if word.startswith("-"):
            action = parser._option_string_actions.get(word.partition("=")[0])
            if action is not None and action.nargs != 0 and "=" not in word:
                expecting = action
            continue
        subs = _subcommands(parser)
        if word in subs:
            parser, positional = subs[word], 0
        else:
            positional += 1
    if expecting is not None:
        found = _values(expecting)
    elif current.startswith("-"):
        found = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--") or len(o) == 2})
    else:
        found = list(_subcommands(parser))
        places = [a for a in parser._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
        if places:
            at = places[min(positional, len(places) - 1)]
            if positional < len(places) or at.nargs in ("+", "*"):
                found += _values(at)
    if found == [FILES]:
        return found
    return [f for f in found if f.startswith(current)]


def answer(mode: str) -> int:
    """The shell's question (COMP_WORDS, COMP_CWORD) answered, one candidate a line."""
    line = os.environ.get("COMP_WORDS", "")
    words = line.split()
    if mode == "complete_fish":  # fish gives the line up to the cursor: its last word is the one to complete
        words += [""] if not line or line[-1].isspace() else []
        cword = len(words) - 1
    else:
        try:
            cword = int(os.environ.get("COMP_CWORD", str(len(words))))
        except ValueError:
            cword = len(words)
    sys.stdout.write("".join(f"{c}\n" for c in candidates(words, cword)))
    return 0
