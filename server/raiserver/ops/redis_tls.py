"""Redis's TLS certificate for worker hosts that reach it across the network (issue 48).

``raiserver secrets --redis-tls`` makes, beside the secrets file and once: ``redis-tls.crt`` and
``redis-tls.key`` (Redis's certificate and key, for ``--tls-port``) and ``redis-ca.pem``, the
certificate of a one-use authority that signed it. The authority's key is made in a temporary
folder and deleted at once, so nothing else can ever be signed by it: a worker that checks the
chain against ``redis-ca.pem`` (``rediss://…?ssl_cert_reqs=required&ssl_ca_certs=…``) talks to
this Redis and no other, whatever name or address it dialled; the host name is therefore not
checked (``ssl_check_hostname=false``), and the first host's address may change freely. The
password (``RAI_REDIS_PASSWORD``) still authenticates the worker to Redis.

openssl makes them (the service image installs it); 10 years, P-256."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

CA_FILE, CERT_FILE, KEY_FILE = "redis-ca.pem", "redis-tls.crt", "redis-tls.key"
DAYS = 3650

_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:redis, DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _openssl(folder: Path, *args: str) -> None:
    res = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {res.stderr.strip()[-500:]}")


def write_redis_tls(folder: Path) -> bool:
    """The three files in ``folder`` (kept if all are there). Returns whether they were made now."""
    names = (CA_FILE, CERT_FILE, KEY_FILE)
    if all((folder / name).exists() for name in names):
        return False
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".redis-tls-", dir=folder) as tmp:
        t = Path(tmp)
        os.chmod(t, 0o700)
        for cn, name in (("rai Redis one-use CA", "ca.cnf"), ("rai Redis", "leaf.cnf")):
            (t / name).write_text(_CONFIG.format(cn=cn))
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
        days = ("-days", str(DAYS))
        _openssl(t, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", *days, "-config", "ca.cnf", "-extensions", "ca")
        _openssl(t, "req", "-new", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-config", "leaf.cnf")
        _openssl(
            t, "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "leaf.crt",
            *days, "-extfile", "leaf.cnf", "-extensions", "leaf",
        )  # fmt: skip
        for src, name in (("ca.pem", CA_FILE), ("leaf.crt", CERT_FILE), ("leaf.key", KEY_FILE)):
            os.chmod(t / src, 0o600)
            os.replace(t / src, folder / name)
    return True
