"""The build file: RAI's format accepted unchanged, mistakes reported with file, line and field."""

from __future__ import annotations

import pytest

from raiprotocol.spec import SpecError, parse_spec

RAI_FORMAT = """\
rai:
  version: 0.2
  image: rai/cuda:12
resources:
  cpu:
    architecture: amd64
  gpu:
    count: 1
  network: false
commands:
  build:
    - /bin/bash -c "cp -rv /src/* /build"
    - nvcc -O3 -o m2 m2.cu
    - /usr/bin/time ./m2 1000
"""


def errors(text: str | bytes) -> list[str]:
    with pytest.raises(SpecError) as exc:
        parse_spec(text)
    return exc.value.messages


def test_rai_format_is_accepted_unchanged():
    spec = parse_spec(RAI_FORMAT)
    assert spec.image == "rai/cuda:12"
    assert spec.gpu_count == 1
    assert spec.commands.build[1] == "nvcc -O3 -o m2 m2.cu"


def test_build_must_be_a_list_of_strings_names_the_line():
    text = RAI_FORMAT.split("commands:")[0] + "commands:\n  build: nvcc -O3 -o m2 m2.cu\n"
    assert errors(text) == ["rai_build.yml:11: commands.build must be a list of strings"]


def test_unknown_key_is_named_with_its_line():
    text = RAI_FORMAT.replace("  network: false\n", "  network: false\n  gpus: 2\n")
    assert errors(text) == ["rai_build.yml:10: resources.gpus is not a known field; did you mean 'gpu'?"]


def test_wrong_type_and_missing_section():
    msgs = errors("rai:\n  version: 0.2\n  image: x\nresources:\n  gpu:\n    count: many\n")
    assert "rai_build.yml:6: resources.gpu.count must be a whole number" in msgs
    assert "rai_build.yml:1: commands is required" in msgs


def test_empty_command_list_and_blank_command():
    assert errors("rai:\n  image: x\ncommands:\n  build: []\n") == ["rai_build.yml:4: commands.build must not be empty"]
    msgs = errors("rai:\n  image: x\ncommands:\n  build:\n    - echo hi\n    - '  '\n")
    assert msgs == ["rai_build.yml:5: commands.build: command 2 is empty"]


def test_malformed_yaml_points_at_the_line():
    msgs = errors("rai:\n  image: x\ncommands:\n  build:\n    - [unclosed\n")
    assert len(msgs) == 1 and msgs[0].startswith("rai_build.yml:") and "malformed YAML" in msgs[0]


def test_network_is_refused():
    text = RAI_FORMAT.replace("network: false", "network: true")
    assert errors(text) == ["rai_build.yml:9: resources.network: jobs run without network access; set it to false or remove the line"]


def test_yaml_bombs_and_non_utf8_are_refused():
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    assert errors(bomb) == ["rai_build.yml:1: YAML anchors and aliases are not allowed"]
    assert errors(b"rai:\n  image: \xff\xfe\n") == ["rai_build.yml: not UTF-8 text (byte 14)"]
    assert "larger than 64 KiB" in errors(b"#" * 70000)[0]


def test_empty_file():
    assert errors("") == ["rai_build.yml:1: the file is empty; it needs 'rai:' and 'commands:' sections"]


def test_a_colon_in_an_unquoted_command_gets_a_hint():
    msgs = errors("rai:\n  image: x\ncommands:\n  build:\n    - echo note: this breaks\n")
    assert msgs == [
        "rai_build.yml:5: commands.build, command 1 must be a string (YAML read it as a mapping because it contains ': '; "
        "put the whole command in quotes)"
    ]


@pytest.mark.parametrize(
    "command", ["""sh -c 'echo "m2.cu(12): error: bad"'""", "echo m2.cu(12): error: bad", 'echo "m2.cu(12): error: bad"']
)
def test_a_colon_the_parser_trips_on_is_shown_with_its_column_and_the_line_to_write(command):
    """Issue 37: `- sh -c 'echo "m2.cu(12): error: …"'` gave 'malformed YAML: mapping values are not
    allowed in this context', saying neither where nor what to do."""
    head = "rai:\n  image: x\ncommands:\n  build:\n    - make\n"
    (msg,) = errors(f"{head}    - {command}\n")
    column = len("    - ") + command.index(": ") + 1
    assert msg.startswith(
        f"rai_build.yml:6: malformed YAML at column {column}: a ': ' inside a value makes YAML read it as a key; "
        "put the whole value in quotes: - "
    ), msg
    suggested = msg.split("put the whole value in quotes: ")[1].split(" (inside")[0]
    assert parse_spec(f"{head}    {suggested}\n").commands.build == ["make", command]  # the line it gives works as is


def test_limits_are_said_in_words():
    assert errors("rai:\n  image: x\nresources:\n  gpu:\n    count: 99\ncommands:\n  build: [echo]\n") == [
        "rai_build.yml:5: resources.gpu.count must be at most 16"
    ]


def test_messages_are_in_words_and_count_from_one():
    """Issue 26: '- false' gave 'commands.build.0 must be a string'; YAML errors spoke of '<block end>'."""
    assert errors("rai:\n  image: x\ncommands:\n  build:\n    - echo ok\n    - false\n    - 5\n    -\n") == [
        "rai_build.yml:6: commands.build, command 2 was read as the boolean false; put it in quotes if it is meant as text",
        "rai_build.yml:7: commands.build, command 3 was read as the number 5; put it in quotes if it is meant as text",
        "rai_build.yml:8: commands.build, command 4 is empty (nothing after the '- '); write the command or remove the line",
    ]
    for broken in (
        "rai:\n  image: x\n commands:\n  build: [a]\n",
        "rai:\n  image: x\ncommands:\n  build:\n    - a\n   - b\n",
        "rai:\n\timage: x\n",
        "rai:\n  image: x\ncommands:\n  build:\n    - [a\n",
    ):
        (msg,) = errors(broken)
        assert "malformed YAML" in msg and "<" not in msg, msg


def test_a_misspelt_field_is_one_error_that_says_what_was_meant():
    """Issue 49: 'comands:' gave two errors ('commands is required' and 'comands is not a known
    field') and no hint."""
    for text, said in [
        (
            "rai:\n  version: 0.2\n  image: x\ncomands:\n  build:\n    - echo a\n",
            "rai_build.yml:4: comands is not a known field; did you mean 'commands'?",
        ),
        (
            "rai:\n  version: 0.2\n  imag: x\ncommands:\n  build:\n    - echo a\n",
            "rai_build.yml:3: rai.imag is not a known field; did you mean 'image'?",
        ),
        (
            "rai:\n  version: 0.2\n  image: x\nresources:\n  limits:\n    wall_secs: 3\ncommands:\n  build:\n    - echo a\n",
            "rai_build.yml:6: resources.limits.wall_secs is not a known field; did you mean 'wall_seconds'?",
        ),
    ]:
        with pytest.raises(SpecError) as exc:
            parse_spec(text)
        assert exc.value.messages == [said]


def test_a_list_item_indented_under_the_command_above_is_refused_with_the_line_to_write():
    """Issue 49: a mis-indented '- echo b' was joined onto the previous command ('echo a - echo b'),
    which then ran and succeeded."""
    text = "rai:\n  version: 0.2\n  image: x\ncommands:\n  build:\n    - echo a\n      - echo b\n"
    with pytest.raises(SpecError) as exc:
        parse_spec(text)
    (said,) = exc.value.messages
    assert said.startswith("rai_build.yml:7: this '- ' line is indented deeper") and said.endswith(": " + "    - echo b"), said
    # a long command wrapped on purpose (no '- ' at the start of its next line) stays one command
    ok = "rai:\n  version: 0.2\n  image: x\ncommands:\n  build:\n    - nvcc -O3 -o m2\n      main.cu\n"
    assert parse_spec(ok).commands.build == ["nvcc -O3 -o m2 main.cu"]
