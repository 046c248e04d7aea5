"""Ranked runs in tests (issue 46): CI has no GPU, so a CPU convolution with the course's harness
(tests/fixtures/ranked_op/op.c, examples/ece408-conv/src/rai_op.h) stands in for the course's
operation. The course's image is rai/busybox with the reference (the honest build) and, for tests
whose subject is not the measurement, a few ready builds a student's solution.sh can exec:
``HONEST_SH`` does the work, ``WRONG_SH`` leaves out part of it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .service import BUSYBOX, ROOT

OP_SOURCE = ROOT / "tests" / "fixtures" / "ranked_op" / "op.c"
HARNESS = ROOT / "examples" / "ece408-conv" / "src"
IMAGE = "rai/ranked-op:test"
IN_IMAGE = "/opt/rai/op"
HONEST_SH = f"exec {IN_IMAGE}/ref"
WRONG_SH = f"exec {IN_IMAGE}/partial"
VENDOR_LIBRARY = "/usr/lib/libfastconv.so"  # C25: a library that does the operation, which a course may forbid
# and where else the image has it: a hard link under another name, and a folder others may cross but not list
VENDOR_ELSEWHERE = ("/opt/rai/op/helper.bin", "/opt/locked/libfastconv.so.2")


def build_op(variant: str, dest: Path) -> Path:
    """The stand-in program, one cheat (or the honest one) per variant, static (the image is busybox)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("a C compiler is needed to build the ranked runs' stand-in (apt-get install gcc libc6-dev)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-O2", "-static", f"-DVARIANT={variant}", f"-I{HARNESS}", str(OP_SOURCE), "-o", str(dest), "-lpthread", "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return dest


def ensure_course_image(docker_engine, work: Path) -> str:
    """The course's image, built once for these sources (its label says which)."""
    layout = f"ref partial {VENDOR_LIBRARY} {VENDOR_ELSEWHERE}".encode()
    digest = hashlib.sha256(OP_SOURCE.read_bytes() + (HARNESS / "rai_op.h").read_bytes() + layout).hexdigest()[:16]
    try:
        if docker_engine.images.get(IMAGE).labels.get("rai.test.source") == digest:
            return IMAGE
    except Exception:  # not there yet  # noqa: BLE001
        pass
    work.mkdir(parents=True, exist_ok=True)
    build_op("honest", work / "ref")
    build_op("partial", work / "partial")
    (work / "Dockerfile").write_text(
        f"FROM {BUSYBOX}\nCOPY ref partial {IN_IMAGE}/\nCOPY ref {VENDOR_LIBRARY}.1\nCOPY ref {VENDOR_LIBRARY}\n"
        f"RUN ln {VENDOR_LIBRARY}.1 {VENDOR_ELSEWHERE[0]} && mkdir /opt/locked && cp {VENDOR_LIBRARY}.1 {VENDOR_ELSEWHERE[1]} "
        "&& chown -R 4242 /opt/locked && chmod 711 /opt/locked\n"
        f'LABEL rai.test.source="{digest}"\n'
    )
    docker_engine.images.build(path=str(work), tag=IMAGE, rm=True, network_mode="none")
    return IMAGE


def offer_course_image(svc, docker_engine, worker: str = "w1") -> None:
    """The operator publishes the course's image on the worker (raiworker publish), as for any image."""
    from raiworker.images import publish

    publish(docker_engine, svc.data / f"work-{worker}", IMAGE, "the course's image (tests)")
    time.sleep(2.5)  # heartbeats come every second: the server knows the worker offers it by now


def course_file(
    student_files: str = "[solution.sh, report.pdf]", timed: str = "sh ./solution.sh", repeats: int = 2, extra: str = ""
) -> str:
    """A course build file for 'final' whose timed command is the student's and whose reference is the course's."""
    return f"""rai:
  version: 0.2
  image: {IMAGE}
commands:
  build:
    - cp -r /src/. /build/
    - echo course build done
ranked:
  student_files: {student_files}
  timed: {timed}
  reference: {IN_IMAGE}/ref
  repeats: {repeats}
  tolerance: 0.5
{extra}"""


def install_course(svc, docker_engine, tmp: Path, text: str | None = None) -> None:
    ensure_course_image(docker_engine, tmp / "course-image")
    offer_course_image(svc, docker_engine)
    (tmp / "final.yml").write_text(text or course_file())
    res = svc.client("admin", "course", "install", "final", str(tmp / "final.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
