"""``~/.rai_profile``: RAI's own format (a ``profile:`` mapping) plus the server's URL.

The environment (``RAI_SERVER``, ``RAI_ACCESS_KEY``, ``RAI_SECRET_KEY``) wins over the file, so a
CI job or a TA's shell can submit without touching anyone's profile.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

DEFAULT_SERVER = "http://127.0.0.1:8000"


class ProfileError(ValueError):
    pass


class Profile(NamedTuple):
    """A NamedTuple, not a pydantic model or a dataclass: the client's start path stays free of
    pydantic and of dataclasses' import (inspect, ast: ~5 ms of every submit)."""

    access_key: str
    secret_key: str
    username: str = ""
    server: str = DEFAULT_SERVER
    firstname: str | None = None
    lastname: str | None = None
    email: str | None = None
    team: str | None = None
    ca_bundle: str | None = None  # a PEM file of the CA the course's server's certificate is signed by (RAI_CA_BUNDLE wins)

    def with_(self, **changes: Any) -> Profile:
        return self._replace(**changes)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Profile:
        """Validated: the keys must be non-empty strings, the rest strings (or absent)."""
        names = set(cls._fields)
        bad = [k for k in ("access_key", "secret_key") if not isinstance(data.get(k), str) or not data[k]]
        bad += [k for k, v in data.items() if k in names and v is not None and not isinstance(v, str) and k not in bad]
        if bad:
            raise ValueError(", ".join(bad))
        return cls(**{k: v for k, v in data.items() if k in names and v is not None})


def profile_path() -> Path:
    return Path(os.environ.get("RAI_PROFILE") or Path.home() / ".rai_profile")


def dump_profile(profile: Profile) -> str:
    import yaml

    values = {k: v for k, v in profile._asdict().items() if k != "server" and v is not None}
    return yaml.safe_dump({"profile": values, "server": profile.server}, sort_keys=False)


def write_profile(profile: Profile, path: Path | None = None) -> Path:
    """Written whole or not at all (a file beside it, renamed over it): a ``login`` killed midway, or
    a program reading the profile while it is written, never sees half of one."""
    path = path or profile_path()
    if path.is_symlink():  # a profile kept elsewhere (dotfiles) is written there, the link kept
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(dump_profile(profile))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


RECREATE = "recreate it with 'raiclient login' (or use the profile file your instructor gave you)"


def server_url(value: str) -> str:
    """A server address as people type it: ``127.0.0.1:8000`` or ``rai.example.edu`` get a scheme
    (http on this machine, https elsewhere); anything that is not an http(s) URL is refused, named."""
    value = value.strip().rstrip("/")
    if "://" not in value:
        host = value.split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        local = host in ("localhost", "") or host.startswith("127.") or host == "::1"
        value = ("http://" if local else "https://") + value
    scheme = value.split("://", 1)[0].lower()
    if scheme not in ("http", "https") or not value.split("://", 1)[1]:
        raise ProfileError(f"the server address {value!r} is not an http:// or https:// URL (e.g. https://rai.example.edu)")
    return value


def read_profile_file(path: Path) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read your profile {path}: {exc.strerror or exc}") from None
    raw = written_form(text)
    if raw is None:
        raw = _yaml_profile(path, text)
    if not isinstance(raw, dict) or not isinstance(raw.get("profile"), dict):
        raise ProfileError(f"your profile {path} has no 'profile:' section with access_key and secret_key; {RECREATE}")
    data = dict(raw["profile"])
    data.setdefault("server", raw.get("server") or DEFAULT_SERVER)
    try:
        return Profile.from_mapping(data)
    except ValueError as exc:
        raise ProfileError(f"your profile {path} is missing or has a bad {exc}; {RECREATE}") from None


def _yaml_profile(path: Path, text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        raise ProfileError(
            f"your profile {path} is damaged ({where} is not valid YAML: {getattr(exc, 'problem', None) or 'unreadable'}); {RECREATE}"
        ) from None


# The form ``dump_profile`` writes (what ``raiclient login`` and ``raiadmin`` give students), read
# without importing yaml (~10 ms of every submit): top-level ``profile:`` and ``server: V``, the
# profile's ``  key: V`` lines, V a plain or single-quoted scalar of URL and key characters. Only
# values YAML 1.1 cannot read as anything but a string are taken: one starting with a letter that
# is no bool or null word, or one with a letter, no '.' or ':' and no 0x/0b prefix (ints, floats,
# dates and times all need digits only, a '.', a ':' or that prefix). Anything else goes to yaml.
_LINE = re.compile(r"(  )?([a-z_]+):(?: (?:'([A-Za-z0-9_@/.:+=-]*)'|([A-Za-z0-9_@/.:+=-]+)))?")
_YAML_WORDS = frozenset(("yes", "no", "true", "false", "on", "off", "null", "y", "n"))


def _surely_str(value: str) -> bool:
    if value[0].isalpha():
        return value.lower() not in _YAML_WORDS and not value.endswith(":")
    return (
        value[0] in "0123456789_-"
        and any(c.isalpha() for c in value)
        and "." not in value
        and ":" not in value
        and not re.match(r"[-+]?0[xXbB]", value)
    )


def written_form(text: str) -> dict[str, Any] | None:
    """The profile as ``dump_profile`` writes it, or None when it is in any other form."""
    raw: dict[str, Any] = {}
    section: dict[str, Any] | None = None
    for line in text.split("\n"):
        if not line:
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            return None
        indented, key, quoted, plain = m.groups()
        if plain is not None and not _surely_str(plain):
            return None
        value = quoted if quoted is not None else plain
        if indented:
            if section is None or value is None or key in section:
                return None
            section[key] = value
        elif key == "profile" and value is None and "profile" not in raw:
            section = raw["profile"] = {}
        elif key == "server" and value is not None and "server" not in raw:
            raw["server"], section = value, None
        else:
            return None
    return raw if section is not None or "profile" in raw else None


def load_profile(server: str | None = None) -> Profile:
    """Environment first, then the profile file; a clear error if neither gives credentials."""
    env_access = os.environ.get("RAI_ACCESS_KEY")
    env_secret = os.environ.get("RAI_SECRET_KEY")
    path = profile_path()
    if env_access and env_secret:
        profile = Profile(access_key=env_access, secret_key=env_secret, username=os.environ.get("RAI_USERNAME", ""))
    elif path.is_file():
        profile = read_profile_file(path)
    else:
        raise ProfileError(
            f"no credentials: {path} does not exist and RAI_ACCESS_KEY/RAI_SECRET_KEY are not set; "
            "run 'raiclient login' or use the profile your instructor gave you"
        )
    url = server or os.environ.get("RAI_SERVER") or profile.server
    return profile.with_(server=server_url(url))
