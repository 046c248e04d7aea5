"""How the client trusts the server's certificate, for both of its transports: the system's
certificate authorities, or only those in a PEM file for a course whose server sits behind its own
CA: ``RAI_CA_BUNDLE``, else the profile's ``ca_bundle`` (so a student sets it once, in the profile
the course hands out). Verification is never switched off."""

from __future__ import annotations

import os
import ssl

CA_BUNDLE = "RAI_CA_BUNDLE"
_from_profile: str | None = None  # the profile's ca_bundle, once a connection with it was made


def use_profile(bundle: str | None) -> None:
    """The profile in use names this CA file (or none)."""
    global _from_profile
    _from_profile = os.path.expanduser(bundle) if bundle else None


def bundle() -> tuple[str | None, str]:
    """The CA file to trust and where it was named ("" and None: the system's authorities)."""
    if os.environ.get(CA_BUNDLE):
        return os.environ[CA_BUNDLE], CA_BUNDLE
    if _from_profile:
        return _from_profile, "your profile's ca_bundle"
    return None, ""


def context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=bundle()[0])


def untrusted_hint() -> str:
    path, where = bundle()
    if path:
        return f"it is not signed by the certificate authority in {where} ({path})"
    return (
        f"if your course's server uses its own certificate authority, set {CA_BUNDLE} to that CA's "
        "file (PEM), which your instructor gives you, or name it in your profile (ca_bundle: PATH, under profile:)"
    )
