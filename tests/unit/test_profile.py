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
