"""Credentials and who may do what.

Keys are random and high-entropy, so a plain SHA-256 of the secret is enough to store (no slow
hash needed); comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from raiserver.access.permissions import ROLES
from raiserver.store.tables import RevokedKey, User


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_keys() -> tuple[str, str]:
    return secrets.token_hex(12), secrets.token_urlsafe(32)


def create_user(db: Session, username: str, role: str = "student", **fields: str | None) -> tuple[User, str]:
    """Make a user with fresh keys; the secret is returned once and only its hash is kept."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    access, secret = new_keys()
    user = User(username=username, role=role, access_key=access, secret_hash=hash_secret(secret), **fields)
    db.add(user)
    db.flush()
    return user, secret


def _retire(db: Session, user: User, reason: str) -> None:
    db.merge(RevokedKey(access_key=user.access_key, username=user.username, reason=reason))


def rotate_keys(db: Session, user: User, reason: str = "rotated") -> str:
    """New keys; the old access key is remembered as retired so its holder gets a clear message."""
    _retire(db, user, reason)
    access, secret = new_keys()
    user.access_key = access
    user.secret_hash = hash_secret(secret)
    return secret


def revoke_keys(db: Session, user: User) -> None:
    """No working key at all until the next rotation: the stored hash matches no secret."""
    _retire(db, user, "revoked")
    user.access_key = "revoked-" + secrets.token_hex(12)
    user.secret_hash = "!"


_NO_USER_HASH = hash_secret(secrets.token_urlsafe(32))


def authenticate(db: Session, access_key: str, secret: str) -> User | None:
    """The user these keys belong to, or None. The secret is hashed and compared in constant time
    whether or not the access key exists, so the answer's timing tells nothing about the secret.
    Callers check the secret before any login limit (a right secret is always served)."""
    user = db.scalar(select(User).where(User.access_key == access_key))
    matches = hmac.compare_digest(user.secret_hash if user is not None else _NO_USER_HASH, hash_secret(secret))
    return user if user is not None and matches else None


def key_tag(access_key: str) -> str:
    """What a web session remembers of the key it logged in with: a new or revoked key ends it."""
    return hashlib.sha256(access_key.encode()).hexdigest()[:24]


def session_user(db: Session, request: Request) -> User | None:
    """The user of the browser session, while it is still valid: the account active and the key
    it logged in with not rotated or revoked since."""
    if "session" not in request.scope:
        return None
    user_id, tag = request.session.get("user_id"), request.session.get("key")
    if user_id is None or not tag:
        return None
    user = db.get(User, user_id)
    if user is None or not user.active or not hmac.compare_digest(tag, key_tag(user.access_key)):
        return None
    since = request.session.get("since")
    if user.sessions_after is not None and (not isinstance(since, (int, float)) or since < user.sessions_after.timestamp()):
        return None  # logged out since: the signed cookie alone no longer counts
    return user


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "?"
