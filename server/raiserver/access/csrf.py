"""Cross-site request forgery: a browser sends our session cookie with any request to us, so a
write made with the cookie must also carry the token the page got with its session (a form field,
or the ``X-CSRF-Token`` header of the page's scripts). The one check, for pages and API alike."""

from __future__ import annotations

import hmac
import secrets

from fastapi import Request

from raiserver.errors import Forbidden


def csrf_token(request: Request) -> str:
    """The session's token, made on its first page."""
    token = request.session.get("csrf")
    if not token:
        token = secrets.token_urlsafe(24)
        request.session["csrf"] = token
    return token


def check_csrf(request: Request, given: str, refusal: str) -> None:
    expected = request.session.get("csrf", "")
    if not expected or not hmac.compare_digest(expected, given):
        raise Forbidden(refusal)
