"""Issue 34, item 1: a worker offers only images published on it, by image id. A label grants
nothing (an image built FROM a course image inherits its labels), a retag of a published name does
not carry the offer to another image, and RAI_WORKER_IMAGES is resolved to ids when the worker
starts. Here with a stand-in for the Docker engine; tests/hostile/test_tls_caps_build_limits_and_images.py runs
the attacks against a real one."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from raiprotocol.models import PullRequest
from raiprotocol.spec import normalize_image
from raiworker import images as im
from raiworker.config import WorkerSettings


@dataclass
class Image:
    id: str
    tags: list[str]
    attrs: dict = field(default_factory=dict)

    @property
    def labels(self) -> dict:
        return (self.attrs.get("Config") or {}).get("Labels") or {}


def image(name: str, layers: int = 2, labels: dict | None = None, cmd: list[str] | None = None) -> Image:
    digest = "sha256:" + hashlib.sha256(f"{name}{layers}{labels}".encode()).hexdigest()
    return Image(
        digest, [name], {"RootFS": {"Layers": [f"sha256:{i}" for i in range(layers)]}, "Config": {"Labels": labels or {}, "Cmd": cmd}}
    )


class Images:
    def __init__(self) -> None:
        self.all: list[Image] = []
        self.pulls: dict[str, Image] = {}

    def add(self, img: Image) -> Image:
        for other in self.all:  # a tag names one image: the new one takes it
            other.tags = [t for t in other.tags if normalize_image(t) not in {normalize_image(n) for n in img.tags}]
        self.all.append(img)
        return img

    def get(self, ref: str) -> Image:
        for img in self.all:
            if img.id == ref or normalize_image(ref) in {normalize_image(t) for t in img.tags}:
                return img
        raise docker.errors.ImageNotFound(ref)

    def list(self) -> list[Image]:
        return list(self.all)

    def pull(self, repo: str, tag: str | None = None) -> Image:
        return self.add(self.pulls[f"{repo}:{tag or 'latest'}"])


class Client:
    def __init__(self) -> None:
        self.images = Images()


def settings(tmp_path: Path, named: str = "") -> WorkerSettings:
    return WorkerSettings(work_dir=tmp_path / "work", worker_images=named, worker_name="w1")


BUSYBOX = {"layers": 1, "labels": {"rai.course": "true"}, "cmd": ["/bin/sh"]}


def test_labels_grant_nothing(tmp_path):
    """Both images of the review: one labelled rai.course="false" and one built FROM rai/busybox
    (which inherits its label). Neither is offered; rai's own busybox is."""
    client, s = Client(), settings(tmp_path)
    busybox = client.images.add(image("rai/busybox:latest", **BUSYBOX))
    derived = client.images.add(image("staff/answers:1", layers=2, labels={"rai.course": "true"}, cmd=["/bin/sh"]))
    labelled_false = client.images.add(image("staff/false:1", layers=2, labels={"rai.course": "false"}))
    assert im.prepare_images(client, s) == []
    assert im.offered_images(client, s) == ["rai/busybox:latest"]
    assert im.is_offered(busybox, s)
    assert not im.is_offered(derived, s) and not im.is_offered(labelled_false, s)


def test_a_busybox_tag_moved_to_another_image_is_not_adopted(tmp_path):
    client, s = Client(), settings(tmp_path)
    fake = client.images.add(image("rai/busybox:latest", layers=2, labels={"rai.course": "true"}, cmd=["/bin/sh"]))
    im.prepare_images(client, s)
    assert not im.is_offered(fake, s) and im.offered_images(client, s) == []


def test_publish_is_by_id_and_a_retag_does_not_carry_it(tmp_path):
    client, s = Client(), settings(tmp_path)
    course = client.images.add(image("course/env:1"))
    image_id, names = im.publish(client, s.work_dir, "course/env:1", "published by the operator (raiworker publish)")
    assert image_id == course.id and names == ["course/env:1"]
    assert im.offered_images(client, s) == ["course/env:1"]
    # staff build something else under the same name: the name now leads to an image nobody published
    swapped = client.images.add(image("course/env:1", layers=3))
    assert not im.is_offered(swapped, s)
    assert im.offered_images(client, s) == []  # the published image lost its name: nothing to ask for


def test_worker_images_are_resolved_when_the_worker_starts(tmp_path):
    client = Client()
    named = client.images.add(image("course/named:2"))
    s = settings(tmp_path, "course/named:2,course/missing:1")
    lines = im.prepare_images(client, s)
    assert len(lines) == 1 and "course/missing:1" in lines[0] and "not on this host" in lines[0]
    assert im.is_offered(named, s)
    swapped = client.images.add(image("course/named:2", layers=5))  # retagged after the start
    assert not im.is_offered(swapped, s)
    im.prepare_images(client, s)  # the next start takes the name's image then, and drops the old one
    assert im.is_offered(swapped, s) and not im.is_offered(named, s)
    im.prepare_images(client, settings(tmp_path))  # no longer named: no longer offered
    assert not im.is_offered(swapped, settings(tmp_path))


def test_star_offers_every_image(tmp_path):
    client, s = Client(), settings(tmp_path, "*")
    anything = client.images.add(image("whatever:1"))
    im.prepare_images(client, s)
    assert im.is_offered(anything, s) and im.offered_images(client, s) == ["whatever:1"]


def test_withdraw_by_name_or_id(tmp_path):
    client, s = Client(), settings(tmp_path)
    a, b = client.images.add(image("a:1")), client.images.add(image("b:1"))
    im.publish(client, s.work_dir, "a:1", "x")
    im.publish(client, s.work_dir, "b:1", "x")
    assert im.withdraw(client, s.work_dir, "a:1") == [a.id]
    assert im.withdraw(None, s.work_dir, b.id[:20]) == [b.id]
    assert im.offered_images(client, s) == [] and im.withdraw(client, s.work_dir, "a:1") == []


def test_pulls_and_loads_through_rai_publish_the_image_they_gave(tmp_path):
    client, s = Client(), settings(tmp_path)
    pulled = image("course/pulled:3")
    client.images.pulls["course/pulled:3"] = pulled
    puller = im.Puller(client, server=None, scratch=tmp_path / "scratch", work_dir=s.work_dir)  # type: ignore[arg-type]
    puller._run([PullRequest(image="course/pulled:3", requested=1.0)])
    assert puller.status == {}
    assert im.published(s.work_dir)[pulled.id]["why"] == "pulled through rai"
    assert im.is_offered(pulled, s)


def test_the_start_up_line_says_why_each_is_offered(tmp_path):
    client, s = Client(), settings(tmp_path, "course/named:2")
    busybox = client.images.add(image("rai/busybox:latest", **BUSYBOX))
    named = client.images.add(image("course/named:2"))
    client.images.add(image("staff/answers:1"))
    im.prepare_images(client, s)
    line = im.offer_line(client, s)
    assert line.startswith("offers 2 image(s) to jobs: ")
    assert f"course/named:2 ({named.id[7:19]}: named in RAI_WORKER_IMAGES)" in line
    assert f"rai/busybox:latest ({busybox.id[7:19]}: rai's own busybox image" in line
    assert "1 other image(s) on this host are not offered (an operator publishes one: raiworker publish IMAGE)" in line
    assert "staff/answers" not in line


def test_an_earlier_releases_pull_list_is_taken_over_once(tmp_path):
    client, s = Client(), settings(tmp_path)
    old = client.images.add(image("course/old:1"))
    s.work_dir.mkdir(parents=True)
    (s.work_dir / "rai-images").write_text("course/old:1\ncourse/gone:1\n")
    im.prepare_images(client, s)
    assert im.is_offered(old, s)
    assert not (s.work_dir / "rai-images").exists() and (s.work_dir / "rai-images.migrated").exists()


def test_a_damaged_record_offers_nothing(tmp_path):
    client, s = Client(), settings(tmp_path)
    a = client.images.add(image("a:1"))
    im.publish(client, s.work_dir, "a:1", "x")
    (s.work_dir / im.PUBLISHED_FILE).write_text("{not json")
    assert not im.is_offered(a, s) and im.published(s.work_dir) == {}


@pytest.mark.parametrize("ref", ["rai/busybox", "docker.io/rai/busybox:latest"])
def test_ensure_busybox_publishes_on_a_worker_when_asked(tmp_path, ref):
    client, s = Client(), settings(tmp_path)
    bb = client.images.add(image("rai/busybox:latest", **BUSYBOX))
    assert im.ensure_busybox_image(client, ref, work_dir=s.work_dir)  # there already: only published
    assert im.is_offered(bb, s)
