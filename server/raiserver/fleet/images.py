"""Images staff ask every worker to hold ("pre-pull"): from the registry by name, or from a
``docker save`` tar uploaded here (for hosts that reach no registry). Requests live in Redis; each
worker sees the ones it lacks in its heartbeat reply, pulls on its own host (jobs have no network),
and reports progress or failure in its next heartbeats."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import redis

from raiprotocol.keys import IMAGE_PULLS
from raiprotocol.models import PullRequest
from raiprotocol.spec import normalize_image
from raiserver.errors import Invalid
from raiserver.store.storage import Storage

IMAGE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@")


class BadImage(Invalid):
    """An image name or archive the workers cannot be asked to use (422)."""


def check_name(image: str) -> str:
    image = image.strip()
    if not image or len(image) > 256 or not set(image) <= IMAGE_NAME_CHARS or image.startswith(("-", "/")):
        raise BadImage(f"bad image name {image[:80]!r}")
    return normalize_image(image)


def tar_images(path: Path) -> list[str]:
    """The image names a ``docker save`` archive carries (its manifest's RepoTags)."""
    try:
        with tarfile.open(path, "r:*") as tar:
            member = tar.getmember("manifest.json")
            if not member.isfile() or member.size > 1024**2:
                raise BadImage("manifest.json is not a small file")
            manifest = json.load(tar.extractfile(member))  # type: ignore[arg-type]
    except (tarfile.TarError, KeyError, ValueError, OSError) as exc:
        raise BadImage(f"not a 'docker save' archive ({exc.__class__.__name__}: no readable manifest.json)") from None
    names = [t for entry in manifest if isinstance(entry, dict) for t in entry.get("RepoTags") or [] if isinstance(t, str)]
    if not names:
        raise BadImage("the archive names no image (save it by name: docker save NAME:TAG -o FILE.tar)")
    return [check_name(n) for n in names]


def blob_path(storage: Storage, sha256: str) -> Path:
    return storage.root / "images" / f"{sha256}.tar"


def request_pull(r: redis.Redis, image: str, blob: str | None = None) -> PullRequest:
    req = PullRequest(image=check_name(image), blob=blob, requested=time.time())
    r.hset(IMAGE_PULLS, req.image, req.model_dump_json())
    return req


def requested(r: redis.Redis) -> list[PullRequest]:
    return [PullRequest.model_validate_json(v) for v in r.hvals(IMAGE_PULLS)]


def wanted_by(r: redis.Redis, held: list[str] | None) -> list[PullRequest]:
    """The requests a worker holding ``held`` still has to carry out (None: a worker without
    containers, which needs none)."""
    if held is None:
        return []
    have = set(held)
    return [req for req in requested(r) if req.image not in have]
