"""How the client trusts the server's certificate, for both of its transports: the system's
certificate authorities, or only those in ``RAI_CA_BUNDLE`` (a PEM file) for a course whose server
sits behind its own CA. Verification is never switched off."""

from __future__ import annotations

import os
import ssl

CA_BUNDLE = "RAI_CA_BUNDLE"


def context() -> ssl.SSLContext:
    bundle = os.environ.get(CA_BUNDLE) or None
    return ssl.create_default_context(cafile=bundle)


def untrusted_hint() -> str:
    if os.environ.get(CA_BUNDLE):
        return f"it is not signed by the certificate authority in {CA_BUNDLE} ({os.environ[CA_BUNDLE]})"
    return (
        f"if your course's server uses its own certificate authority, set {CA_BUNDLE} to that CA's "
        "file (PEM), which your instructor gives you"
    )
