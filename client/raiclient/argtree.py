"""The pieces the command-line definition (``commands.py``, ``commands_admin.py``) is built of, on
the standard library's argparse: the parsers' help format, a command that names what runs it
(``run``: "module:function", imported only when it runs) and what completes each value
(``complete``: "kinds", "jobs", "shells", read by ``complete.py``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUMMARY = "Submit GPU jobs to rai and follow them live."
# what the admin commands need beyond the standard library (their typed API calls)
EXTRAS = ("pydantic",)


class Formatter(argparse.HelpFormatter):
    """argparse's help, with "Usage:" as the rest of the client writes it."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def add_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, "Usage: " if prefix is None else prefix)

    def _format_action(self, action: argparse.Action) -> str:
        """The commands one a line under "Commands:", without argparse's line of their metavar."""
        if isinstance(action, argparse._SubParsersAction):
            return "".join(super(Formatter, self)._format_action(sub) for sub in action._get_subactions())
        return super()._format_action(action)


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number in [low, high], said plainly when it is not."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}" if high is not None else f"{value} is less than {low}")
        return value

    return parse


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file" if path.exists() else f"{text} does not exist")
    return path


class Suggesting(argparse.ArgumentParser):
    """A parser whose "invalid choice" names the closest one, as the build file's errors do:
    ``raiclient log`` -> "invalid choice: 'log' (choose from …); did you mean 'logs'?"."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            import difflib  # only on the way to an error: the client's start stays small

            close = difflib.get_close_matches(str(value), [str(c) for c in action.choices or ()], n=1, cutoff=0.75)
            if not close or "meant" in exc.message:  # Python 3.14's own suggestion, where it is on
                raise
            raise argparse.ArgumentError(action, f"{exc.message}; did you mean '{close[0]}'?") from None


class Strict(Suggesting):
    """A command's parser: what it does not take is said with its own usage, not the top one's."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


class Tree:
    """Builds the parsers; ``command`` adds one that runs, ``group`` one that holds others."""

    def __init__(self) -> None:
        self.top = Suggesting(
            prog="raiclient",
            description=SUMMARY,
            epilog="raiclient COMMAND --help tells more about one command.",
            formatter_class=Formatter,
        )
        self.top.set_defaults(group=self.top)

    @staticmethod
    def _sub(parent: argparse.ArgumentParser) -> Any:
        found = getattr(parent, "_rai_sub", None)
        if found is None:
            found = parent.add_subparsers(title="Commands", metavar="COMMAND", parser_class=Strict)
            parent._rai_sub = found  # type: ignore[attr-defined]
        return found

    def group(self, parent: argparse.ArgumentParser, name: str, text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = self._sub(parent).add_parser(name, help=text, description=text, formatter_class=Formatter)
        p.set_defaults(group=p)
        return p

    def command(
        self, parent: argparse.ArgumentParser, name: str, run: str, text: str, more: str = "", admin: bool = False
    ) -> argparse.ArgumentParser:
        whole = f"{text} {more}".strip()
        p: argparse.ArgumentParser = self._sub(parent).add_parser(name, help=whole, description=whole, formatter_class=Formatter)
        p.set_defaults(run=run, needs=EXTRAS if admin else (), group=None)
        return p


def arg(p: argparse.ArgumentParser, *names: str, complete: str | None = None, **kw: Any) -> argparse.Action:
    """An argument, with what completes its value (read by complete.py)."""
    action = p.add_argument(*names, **kw)
    action.complete = complete  # type: ignore[attr-defined]
    return action


def server(p: argparse.ArgumentParser) -> None:
    arg(p, "--server", metavar="URL", help="rai server URL (default: RAI_SERVER, else your profile's)")


def as_json(p: argparse.ArgumentParser) -> None:
    arg(p, "--json", dest="as_json", action="store_true", help="print the data as JSON (raiprotocol's models) and nothing else")


def job(p: argparse.ArgumentParser, text: str = "the job (its id, or any unique start or end of it)", optional: bool = False) -> None:
    if optional:
        arg(p, "job_id", nargs="?", metavar="JOB", complete="jobs", help=f"{text}; default: your last one")
    else:
        arg(p, "job_id", metavar="JOB", complete="jobs", help=text)
