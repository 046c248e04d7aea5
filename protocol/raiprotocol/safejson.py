"""JSON for a terminal or ``jq`` (issue 50, item 2): ``--json`` prints what jobs wrote (a model's
name comes from a program's output), and JSON itself only escapes C0 controls. Every C0 and C1
control (U+009B is an 8-bit CSI), the bidi marks, embeddings, overrides and isolates, and the line
and paragraph separators are written as ``\\uXXXX``: the same strings to any JSON reader, nothing
for a terminal to obey. The one helper both clients use (the full one and raiclient.pyz)."""

from __future__ import annotations

import json
import re
from typing import Any

# outside a string, serialized JSON holds only its layout's newlines and spaces; inside one, any of
# these stands for itself and \uXXXX is the same string
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escaped(text: str) -> str:
    """Serialized JSON (``json.dumps``, pydantic's ``dump_json``) with every unsafe character as ``\\uXXXX``."""
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(value: Any) -> str:
    """``value`` as indented JSON, non-ASCII text kept readable but no control or bidi character raw."""
    return escaped(json.dumps(value, indent=2, ensure_ascii=False))
