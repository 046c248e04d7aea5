"""What a new user meets first with the client (a walk through the README): a folder that is not
there, a project without a build file, a command name mistyped."""

from __future__ import annotations

import re

import pytest

from raiclient.commands import build
from raiclient.submit import run
from raiprotocol.spec import SpecError, load_spec, parse_spec


def test_submit_of_a_missing_folder_says_it_does_not_exist_and_of_a_file_that_it_is_not_a_folder(tmp_path, capsys):
    assert run(tmp_path / "does-not-exist", None, "dev", False, None) == 2
    assert capsys.readouterr().err.strip().endswith(f"{tmp_path / 'does-not-exist'} does not exist")
    (tmp_path / "notes.txt").write_text("a file")
    assert run(tmp_path / "notes.txt", None, "dev", False, None) == 2
    assert capsys.readouterr().err.strip().endswith(f"{tmp_path / 'notes.txt'} is not a folder")


def test_a_project_without_a_build_file_is_shown_the_smallest_one_and_where_the_format_is(tmp_path, capsys):
    """raiclient.pyz, one file, has no examples/hello to point at: the message carries the two lines."""
    assert run(tmp_path, None, "dev", False, None) == 2
    err = capsys.readouterr().err
    assert "examples/hello" not in err and "docs/students.md" in err and err.count("\n") == 1, err
    assert f"{tmp_path / 'rai_build.yml'}: not found" in err
    with pytest.raises(SpecError) as exc:
        load_spec(tmp_path)
    assert exc.value.messages == [err.strip().removeprefix("✱ error: ")]  # the same words either way
    # the two lines it gives are a build file that works, once IMAGE and COMMAND are filled in
    lines = re.findall(r"'([^']+)'", err.split("the two lines ", 1)[1])[:2]
    spec = parse_spec("\n".join(lines).replace("IMAGE", "rai/busybox:latest").replace("COMMAND", "make") + "\n")
    assert spec.image == "rai/busybox:latest" and spec.commands.build == ["make"]


@pytest.mark.parametrize(("argv", "meant"), [(["log"], "logs"), (["statsu"], "status"), (["admin", "kind"], "kinds"), (["zzz"], None)])
def test_a_mistyped_command_names_the_closest_one(argv, meant, capsys):
    with pytest.raises(SystemExit) as exc:
        build().parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"invalid choice: '{argv[-1]}' (choose from " in err
    assert err.endswith(f"; did you mean '{meant}'?") if meant else "did you mean" not in err, err
