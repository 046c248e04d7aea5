"""The slot folder a spare container sees at /src is emptied between jobs without following the
links a job's archive may have put there: nothing outside it is touched."""

from __future__ import annotations

from raiworker.executors.docker import _empty, _move_entries


def test_emptying_removes_links_not_what_they_point_to(tmp_path):
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "precious").write_text("not the job's")
    slot = tmp_path / "slot"
    (slot / "dir" / "deep").mkdir(parents=True)
    (slot / "dir" / "deep" / "f").write_text("x")
    (slot / "dir" / "up").symlink_to(outside / "keep")
    (slot / "link-to-dir").symlink_to(outside / "keep")
    (slot / "link-to-file").symlink_to(outside / "keep" / "precious")
    (slot / "dangling").symlink_to(tmp_path / "nowhere")
    (slot / "plain").write_text("y")
    assert _empty(slot)
    assert list(slot.iterdir()) == []
    assert (outside / "keep" / "precious").read_text() == "not the job's"


def test_moving_a_project_in_keeps_links_as_links(tmp_path):
    src, slot = tmp_path / "src", tmp_path / "slot"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.cu").write_text("kernel")
    (src / "l").symlink_to("/etc/passwd")
    slot.mkdir()
    assert _move_entries(src, slot)
    assert list(src.iterdir()) == [] and (slot / "sub" / "a.cu").read_text() == "kernel"
    assert (slot / "l").is_symlink() and str((slot / "l").readlink()) == "/etc/passwd"
