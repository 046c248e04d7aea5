"""Issue 50, item 2: ``--json`` output (``status``, ``history``, every listing, both clients) holds
no terminal control and no bidi control raw: each is written ``\\uXXXX``, the same string to a JSON
reader. Checked over every code point against Unicode's properties."""

from __future__ import annotations

import io
import json
import sys
import unicodedata

import pytest

from raiprotocol.models import VersionOut
from raiprotocol.safejson import dumps, escaped

# bidi classes of the explicit embeddings, overrides and isolates (UAX #9)
EXPLICIT = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}
MARKS = {"LEFT-TO-RIGHT MARK", "RIGHT-TO-LEFT MARK", "ARABIC LETTER MARK"}


def unsafe(c: str) -> bool:
    """What a terminal may obey or reorder by, from Unicode's properties: controls (C0, DEL, C1),
    the explicit bidi formatting characters, the bidi marks, line and paragraph separators."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp") or unicodedata.bidirectional(c) in EXPLICIT or unicodedata.name(c, "") in MARKS


def test_every_unsafe_code_point_is_escaped_and_every_string_reads_back_the_same():
    raw, changed = [], []
    for cp in range(0x110000):
        c = chr(cp)
        text = dumps(f"m{c}x")  # a string alone: no layout newline
        if unsafe(c) and c in text:
            raw.append(hex(cp))
        if json.loads(text) != f"m{c}x":
            changed.append(hex(cp))
    assert raw == [] and changed == []
    value = {"model": "m\x9b\u202ex", "list": [1, "é ✱ 名"]}
    assert dumps(value) == '{\n  "model": "m\\u009b\\u202ex",\n  "list": [\n    1,\n    "é ✱ 名"\n  ]\n}'  # readable text kept
    assert json.loads(dumps(value)) == value


def test_pydantic_json_is_escaped_the_same():
    """The full client's print_json (pydantic's dump_json escapes only C0)."""
    text = escaped(VersionOut(client="1\x9b31m\u202e\u2066\x85\x7f", server="s").model_dump_json(indent=2))
    assert not any(unsafe(c) for c in text.replace("\n", "")) and json.loads(text)["client"] == "1\x9b31m\u202e\u2066\x85\x7f"


@pytest.mark.parametrize("command", ["history", "status"])
def test_the_listings_print_no_control_raw(monkeypatch, command):
    """The --json path of raiclient.pyz and the full client (listings.run), on a server's answer
    whose model name came from a job's output."""
    from raiclient import listings

    job = {"id": "J1", "state": "succeeded", "exit_code": 0, "results": {"correctness": {"m\x9b2J\u202eevil\u2067\x1b": 0.9}}}

    class Conn:
        def json(self, method, path, params=None):
            return {"jobs": [job]} if command == "history" else job

        def close(self):
            pass

    monkeypatch.setattr(listings, "connect", lambda server: Conn())
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert listings.run(listings.Listing(command, job="J1" if command == "status" else None)) == 0
    text = out.getvalue()
    assert not any(unsafe(c) for c in text.replace("\n", "")), ascii(text)
    read = json.loads(text)
    assert (read[0] if command == "history" else read)["results"] == job["results"]
