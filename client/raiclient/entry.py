"""The ``raiclient`` command's entry point, for the installed client and ``raiclient.pyz`` alike:
reads the one command-line definition (``commands.py``, argparse) and runs the command's module,
imported only then. Every student command runs on the standard library; the admin commands need
the full client's packages (``commands.EXTRAS``), and without them say how to install it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from . import __version__

__all__ = ["color_arg", "main"]


def color_arg(args: list[str]) -> tuple[str | None, list[str]]:
    """``--color MODE`` (or ``--color=MODE``) wherever it is on the command line, and the rest:
    it is the whole command line's option, so ``raiclient logs JOB --color always`` works too."""
    mode: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--":
            rest += args[i:]
            break
        name, eq, value = args[i].partition("=")
        if name == "--color" and (eq or i + 1 < len(args)):
            mode = value if eq else args[i + 1]
            i += 1 if eq else 2
            continue
        rest.append(args[i])
        i += 1
    return mode, rest


def main(argv: list[str] | None = None) -> None:
    from .output import error, guard_pipes, set_color

    guard_pipes()
    argv = list(sys.argv if argv is None else argv)
    if os.environ.get("_RAICLIENT_COMPLETE"):  # the shell asks for completions
        from .complete import answer

        raise SystemExit(answer(os.environ["_RAICLIENT_COMPLETE"]))
    mode, args = color_arg(argv[1:])
    if mode is not None:
        try:
            set_color(mode)
        except ValueError as exc:
            error(str(exc))
            raise SystemExit(2) from None
    if args == ["--version"]:
        print(f"raiclient {__version__}")
        return
    from .commands import build

    ns = build().parse_args(args)
    if ns.show_completion is not None or ns.install_completion is not None:
        from .complete import install, show

        raise SystemExit(show(ns.show_completion) if ns.show_completion is not None else install(ns.install_completion))
    if ns.version:
        print(f"raiclient {__version__}")
        return
    run = getattr(ns, "run", None)
    if run is None:  # a command that holds others, alone: its help
        ns.group.print_help()
        return
    _extras_or_say_how(ns.needs, args)
    module, _, function = run.partition(":")
    raise SystemExit(getattr(importlib.import_module(module), function)(ns))


def _extras_or_say_how(needs: tuple[str, ...], args: list[str]) -> None:
    """The admin commands need the full client's packages; ``raiclient.pyz`` on a bare Python has
    none: say what runs here and exactly how to install the rest, instead of a traceback."""
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if not missing:
        return
    from .about import server_info
    from .output import error

    server = (server_info(None)[0] or "SERVER").rstrip("/")
    words = [a for a in args if not a.startswith("-")][:3]
    error(
        f"'raiclient {' '.join(words)}' needs the full client ({', '.join(missing)} is not installed here); "
        "this one-file client runs every student command. Install the full client in its own environment, either"
    )
    sys.stderr.write(
        f"  pipx install --pip-args='--find-links {server}/client/' raiclient\n"
        "or\n"
        "  python3 -m venv ~/.venvs/raiclient\n"
        f"  ~/.venvs/raiclient/bin/pip install --find-links {server}/client/ raiclient\n"
        "  ~/.venvs/raiclient/bin/raiclient …\n"
    )
    raise SystemExit(2)


if __name__ == "__main__":
    main()
