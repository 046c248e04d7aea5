"""The profile and the server address as students write them (issue 26)."""

from __future__ import annotations

import pytest

from raiprotocol.profile import ProfileError, read_profile_file, server_url


@pytest.mark.parametrize(
    "typed, url",
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("localhost:8000/", "http://localhost:8000"),
        ("rai.example.edu", "https://rai.example.edu"),
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),
        ("https://rai.example.edu/", "https://rai.example.edu"),
    ],
)
def test_a_server_address_without_a_scheme_gets_one(typed, url):
    assert server_url(typed) == url


def test_a_server_address_that_is_no_url_is_named():
    with pytest.raises(ProfileError, match="'ftp://x' is not an http:// or https:// URL"):
        server_url("ftp://x")


def test_a_damaged_profile_names_its_line_and_how_to_recreate_it(tmp_path):
    path = tmp_path / ".rai_profile"
    path.write_text("profile:\n  access_key: abc\n  secret_key: [unclosed\nserver: x\n")
    with pytest.raises(ProfileError) as caught:
        read_profile_file(path)
    message = str(caught.value)
    assert f"your profile {path} is damaged (line" in message and "raiclient login" in message
    assert "Error" not in message and "column" not in message  # no parser internals


TRICKY = [
    "yes",
    "No",
    "ON",
    "off",
    "null",
    "Null",
    "y",
    "n",
    "true",
    "0x1f",
    "-0x1f",
    "0b11",
    "1_000",
    "12:30",
    "2001-12-14",
    "1e5",
    "-1e5",
    "+12e3",
    "0o17",
    "0123abc",
    "-abc",
    "_x",
    "a:b",
    "a:",
    "http://127.0.0.1:8000",
    "https://rai.example.edu",
    "1.5",
    ".inf",
    "=",
    "@x",
    "/x",
    "~",
    "12",
    "007",
    "abc#d",
    "x y",
    "0123456789abcdef01234567",
    "-",
]


def _profiles():
    import secrets

    from raiprotocol.profile import Profile, dump_profile

    for _ in range(300):  # what the server issues: token_hex(12) access keys, token_urlsafe(32) secrets
        yield dump_profile(Profile(access_key=secrets.token_hex(12), secret_key=secrets.token_urlsafe(32), username="s1", team="t"))
    for value in TRICKY:
        yield dump_profile(Profile(access_key=value, secret_key=value, username=value, email=value, server=f"http://{value}"))
        yield f"profile:\n  access_key: {value}\n  secret_key: '{value}'\nserver: {value}\n"
        yield f"profile:\n  access_key: k\n  secret_key: {value}\n"
        yield f"server: {value}\nprofile:\n  access_key: k\n  secret_key: s\n"


def test_the_profile_as_raiclient_writes_it_is_read_without_yaml_and_as_yaml_reads_it():
    import yaml

    from raiprotocol.profile import written_form

    fast = 0
    for text in _profiles():
        try:
            expected = yaml.safe_load(text)
        except yaml.YAMLError:
            expected = None
        got = written_form(text)
        if got is not None:  # taken without yaml: exactly what yaml reads
            assert got == expected, text
            fast += 1
    assert fast >= 300  # every profile the server issues


def test_a_profile_in_another_form_is_still_read_by_yaml(tmp_path):
    from raiprotocol.profile import read_profile_file

    path = tmp_path / ".rai_profile"
    path.write_text('# my keys\nprofile: {access_key: "0x1f", secret_key: yes-really}\nserver: http://127.0.0.1:9\n')
    p = read_profile_file(path)
    assert (p.access_key, p.secret_key, p.server) == ("0x1f", "yes-really", "http://127.0.0.1:9")
    path.write_text("profile:\n  access_key: 0x1f\n  secret_key: s\n")  # YAML reads an int: named, not taken
    with pytest.raises(ProfileError, match="bad access_key"):
        read_profile_file(path)


def test_a_profile_that_cannot_be_written_whole_leaves_the_old_one_as_it_was(tmp_path, monkeypatch):
    """A full disk (or a login killed) midway: the student keeps their working keys, and nothing
    half-written is left beside them."""
    from raiprotocol import profile
    from raiprotocol.profile import Profile, write_profile

    path = tmp_path / ".rai_profile"
    write_profile(Profile("old-key", "old-secret", "ann", "https://rai.example.edu"), path)

    def full(_: Profile) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profile, "dump_profile", full)
    with pytest.raises(OSError, match="No space left"):
        write_profile(Profile("new-key", "new-secret", "ann", "https://rai.example.edu"), path)
    assert read_profile_file(path).access_key == "old-key"
    assert [p.name for p in tmp_path.iterdir()] == [".rai_profile"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_linked_profile_is_written_where_the_link_points(tmp_path):
    from raiprotocol.profile import Profile, write_profile

    kept = tmp_path / "dotfiles" / "rai_profile"
    kept.parent.mkdir()
    kept.write_text("")
    link = tmp_path / ".rai_profile"
    link.symlink_to(kept)
    write_profile(Profile("k", "s", "ann", "https://rai.example.edu"), link)
    assert link.is_symlink() and read_profile_file(kept).access_key == "k"
