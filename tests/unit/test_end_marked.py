"""The exec of a job's last command that goes on to copy /build (issue 38): the worker finds
rai-pty's end line by its token wherever the engine's frames cut the stream, and nothing else."""

from __future__ import annotations

import struct

from raiworker.executors.docker.collect import EndMarked

TOKEN = "5f" * 16


class Sink:
    def __init__(self) -> None:
        self.got: dict[str, bytes] = {"out": b"", "err": b""}

    def feed(self, stream, data: bytes) -> None:
        self.got[stream.value] += data


def frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + struct.pack(">I", len(data)) + data


def test_the_end_line_is_found_wherever_the_frames_and_reads_cut_it():
    out = b"line 1\nline 2 \x00 with a NUL\n\x00rai-end:not-the-token:0\n"
    tar = b"TAR" * 100
    wire_out = out + b"\x00rai-end:" + TOKEN.encode() + b":42\n" + tar
    for cut in range(1, len(wire_out)):  # the engine's frames split the stdout stream anywhere
        wire = frame(1, wire_out[:cut]) + frame(2, b"late stderr\n") + frame(1, wire_out[cut:])
        for size in (1, 7, len(wire)):  # and each read of the socket too
            sink = Sink()
            frames = EndMarked(sink, TOKEN)  # type: ignore[arg-type]
            for i in range(0, len(wire), size):
                frames.feed(wire[i : i + size])
            assert frames.code == 42
            assert sink.got == {"out": out, "err": b"late stderr\n"}
            assert bytes(frames.after) == tar


def test_without_the_end_line_every_byte_is_the_jobs_output():
    sink = Sink()
    frames = EndMarked(sink, TOKEN)  # type: ignore[arg-type]
    text = b"ends like the line starts\n\x00rai-end:" + TOKEN.encode()[:5]
    frames.feed(frame(1, text))
    assert sink.got["out"] == text[: text.index(b"\x00rai")]  # held back: it may be the line's start
    frames.flush_held()  # the exec ended there
    assert frames.code is None and sink.got["out"] == text


def test_only_a_copy_that_ran_to_its_end_proves_the_job_gone():
    from raiworker.executors.docker.collect import proved_contained
    from raiworker.executors.docker.scripts import LEFT_OVER

    assert proved_contained(0) and proved_contained(1)  # tar's own statuses, after the kill pass
    assert not proved_contained(LEFT_OVER)  # a process survived it
    assert not proved_contained(137) and not proved_contained(143)  # killed part way (SIGKILL, SIGTERM)
    assert not proved_contained(None)  # no status at all
