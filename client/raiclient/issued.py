"""Where this staff member's client wrote the profiles it issued (``admin roster import``, ``admin
keys rotate``), so that a rotation replaces the file the student was given rather than leaving
it stale beside a new one. A small JSON map, username → absolute path, next to the staff
member's own profile (``~/.rai_profile.issued``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from raiprotocol.profile import profile_path


def record_path() -> Path:
    own = profile_path()
    return own.with_name(own.name + ".issued")


def _read() -> dict[str, str]:
    try:
        data = json.loads(record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def remember(written: dict[str, Path]) -> None:
    """Note where each user's profile now lives (best effort: a read-only home loses only the note)."""
    data = _read()
    data.update({user: str(path.resolve()) for user, path in written.items()})
    path = record_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def where(username: str) -> tuple[Path, str]:
    """Where ``username``'s new profile goes, and why there: where it was written before (as this
    client noted), else ``./profiles/`` when roster import's default folder holds it, else ``./``."""
    noted = _read().get(username)
    if noted:
        return Path(noted), "where it was written before"
    default = Path("profiles") / f"{username}.rai_profile"
    if default.exists():
        return default, "replacing the one roster import wrote"
    return Path(f"{username}.rai_profile"), "no earlier profile known"
