"""The hostile suite: every upload and every job treated as an attack. Each case asserts what the
user sees (HTTP status and message, or job state and log line) and that the service then runs the
next normal job."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest
from helpers import build_file, tar_gz

pytestmark = pytest.mark.timeout(300)


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def texts(log: list[dict], stream: str | None = None) -> list[str]:
    return [ln["text"] for ln in log if stream is None or ln["s"] == stream]


# -- archives ---------------------------------------------------------------------------------

ARCHIVES = {
    "zip-slip": ([(entry("../../x"), b"x")], "entry '../../x': '..' in paths is not allowed"),
    "absolute path": ([(entry("/etc/cron.d/evil"), b"x")], "entry '/etc/cron.d/evil': absolute paths are not allowed"),
    "symlink to /etc/passwd": (
        [(entry("pw", tarfile.SYMTYPE, "/etc/passwd"), None)],
        "entry 'pw': symlink to an absolute path (/etc/passwd) is not allowed",
    ),
    "hardlink out": (
        [(entry("hl", tarfile.LNKTYPE, "../../etc/shadow"), None)],
        "entry 'hl': hard link points outside the project (../../etc/shadow)",
    ),
    "device node": ([(entry("sda", tarfile.BLKTYPE), None)], "entry 'sda': device files, FIFOs and other special files are not allowed"),
    "filename with newline": ([(entry("a\nb.txt"), b"x")], "entry 'a\\nb.txt': name contains a control character"),
    "non-UTF-8 name": ([(entry(b"caf\xe9.txt".decode("utf-8", "surrogateescape")), b"x")], "entry b'caf\\xe9.txt': name is not UTF-8"),
}


@pytest.mark.parametrize("case", list(ARCHIVES))
def test_unsafe_archive_entry(hostile, case):
    members, message = ARCHIVES[case]
    r = hostile.post(tar_gz(members))
    assert (r.status_code, r.json()["detail"]) == (400, message)
    hostile.still_serves()


def test_200k_tiny_files(hostile):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for i in range(200_000):
            tar.addfile(tarfile.TarInfo(f"f{i}"))
    r = hostile.post(buf.getvalue())
    assert (r.status_code, r.json()["detail"]) == (400, "archive has more than 20000 entries")
    hostile.still_serves()


def test_10_gb_entry_is_refused_from_its_header(hostile):
    # a header that claims 10 GB, then nothing: refused before any of it would be unpacked
    info = tarfile.TarInfo("huge.bin")
    info.size = 10 * 1024**3
    raw = io.BytesIO()
    raw.write(info.tobuf(format=tarfile.GNU_FORMAT))
    raw.write(b"\0" * 4096)
    r = hostile.post(gzip.compress(raw.getvalue()))
    assert (r.status_code, r.json()["detail"]) == (400, "archive unpacks to more than 2048 MiB")
    hostile.still_serves()


def test_zero_bomb_by_compression_ratio(hostile):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 300 * 1024**2
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    r = hostile.post(buf.getvalue())
    assert (r.status_code, r.json()["detail"]) == (
        400,
        "archive expands more than 200x (more than 64 MiB from little: a file of zeros or filler?); leave such files out with .raiignore",
    )
    hostile.still_serves()


@pytest.mark.parametrize(
    "body, case",
    [
        (gzip.compress(b"x" * 5000)[:40], "truncated gzip"),
        (b"PK\x03\x04 this is a zip, not a tarball", "not a tar at all"),
        (b"", "0 bytes"),
    ],
)
def test_unreadable_archive(hostile, body, case):
    r = hostile.post(body)
    assert r.status_code == 400
    assert r.json()["detail"].startswith("not a readable .tar.gz archive"), (case, r.json())
    hostile.still_serves()


# -- build files ------------------------------------------------------------------------------

BOMB = b"rai: &a\n  image: [&b x, *a]\ncommands:\n  build: [*b, *b]\n"
SPECS = {
    "billion laughs": (BOMB, "rai_build.yml:1: YAML anchors and aliases are not allowed"),
    "5 MB YAML": (b"# " + b"x" * 5_000_000 + b"\n", "rai_build.yml: file is larger than 64 KiB"),
    "wrong types": (
        b"rai:\n  image: 42\ncommands:\n  build: {a: b}\n",
        "rai_build.yml:2: rai.image was read as the number 42; put it in quotes if it is meant as text\n"
        "rai_build.yml:4: commands.build must be a list of strings",
    ),
    "unknown image": (
        b"rai:\n  image: evil/miner:latest\ncommands:\n  build: [echo]\n",
        "rai_build.yml: image 'evil/miner:latest' is not allowed on queue 'gpu'; use one of: rai/busybox:latest",
    ),
    "99 GPUs": (build_file(["echo"], "resources:\n  gpu:\n    count: 99\n"), "rai_build.yml:6: resources.gpu.count must be at most 16"),
    "network: true": (
        build_file(["echo"], "resources:\n  network: true\n"),
        "rai_build.yml:5: resources.network: jobs run without network access; set it to false or remove the line",
    ),
    "10k commands": (
        b"rai:\n  image: rai/busybox:latest\ncommands:\n  build: [" + b", ".join([b"e"] * 10_000) + b"]\n",
        "rai_build.yml:4: commands.build must have at most 1000 entries",
    ),
}


@pytest.mark.parametrize("case", list(SPECS))
def test_hostile_build_file(hostile, case):
    spec, message = SPECS[case]
    r = hostile.post(tar_gz([], spec))
    assert (r.status_code, r.json()["detail"]) == (422, message)
    hostile.still_serves()


# -- at run time ------------------------------------------------------------------------------


def test_fork_bomb_is_contained(hostile):
    job, log = hostile.run(["sh -c 'b() { b | b & }; b; sleep 3'"], extra="resources:\n  limits:\n    wall_seconds: 8\n")
    assert job["state"] in ("succeeded", "failed", "timed_out"), job  # it ends, whatever the bomb did
    assert any("fork" in t.lower() or "resource temporarily unavailable" in t.lower() for t in texts(log, "err")), (
        "the pids limit should have stopped the forks"
    )
    hostile.still_serves()


def test_memory_hog_is_killed_and_named(hostile):
    job, log = hostile.run(["sh -c 'x=$(head -c 400000000 /dev/zero | tr \"\\\\0\" a); echo ${#x}'"])
    assert job["state"] == "failed" and job["exit_code"] == 137, job
    assert "killed: out of memory (limit 0.25 GiB)" in texts(log, "sys")
    hostile.still_serves()


@pytest.mark.parametrize("where", ["/build", "/tmp"])
def test_disk_fill(hostile, where):
    job, log = hostile.run([f"dd if=/dev/zero of={where}/fill bs=1M count=1000"])
    assert job["state"] == "failed", job
    assert any("No space left on device" in t for t in texts(log, "err"))
    hostile.still_serves()


def test_one_gigabyte_of_output_is_truncated_once_and_the_job_finishes(hostile):
    job, log = hostile.run(["sh -c 'yes 0123456789abcdef0123456789abcdef | head -c 1000000000'", "echo after-the-flood"], timeout=240)
    assert job["state"] == "succeeded", job
    sys_lines = texts(log, "sys")
    assert sys_lines.count("output truncated after 1 MiB; the job keeps running") == 1
    assert "after-the-flood" not in texts(log, "out")  # past the cap nothing more is kept
    assert sum(len(t) + 1 for t in texts(log, "out")) <= 1024 * 1024
    assert [ln["n"] for ln in log] == list(range(1, len(log) + 1))  # the stored log is the live stream


def test_one_100_mb_line_without_newline(hostile):
    job, log = hostile.run(["sh -c 'head -c 100000000 /dev/zero | tr \"\\\\0\" x'"], timeout=240)
    assert job["state"] == "succeeded", job
    assert "output truncated after 1 MiB; the job keeps running" in texts(log, "sys")
    assert max(len(t) for t in texts(log, "out")) <= 64 * 1024  # cut into pieces, never one huge line
    hostile.still_serves()


def test_binary_and_invalid_utf8_output(hostile):
    job, log = hostile.run(
        [
            "sh -c 'printf \"ok \\\\377\\\\376\\\\000 end\\\\n\"; head -c 2000 /dev/urandom; echo'",
            "printf 'ls \\342\\200\\250 nel \\302\\205 end\\ncr \\r end\\n'",
        ]
    )
    assert job["state"] == "succeeded", job
    assert any(t.startswith("ok \ufffd\ufffd") for t in texts(log, "out"))
    # Unicode line breaks inside a line must not break the live stream's framing
    assert "ls \u2028 nel \x85 end" in texts(log, "out")
    assert " end" in texts(log, "out")  # a carriage return folds the line as a terminal shows it
    hostile.still_serves()


def test_network_attempt_fails_inside(hostile):
    job, log = hostile.run(["sh -c 'wget -T 3 -q -O- http://127.0.0.1:80/ || echo NO-NETWORK; ip addr 2>/dev/null | grep -c inet || true'"])
    assert job["state"] == "succeeded" and "NO-NETWORK" in texts(log, "out")
    hostile.still_serves()


def test_write_to_src_fails(hostile):
    job, log = hostile.run(["touch /src/owned"])
    assert job["state"] == "failed" and job["exit_code"] == 1
    assert any("Read-only file system" in t for t in texts(log, "err"))
    hostile.still_serves()


def test_setuid_attempt_gains_nothing(hostile):
    job, log = hostile.run(
        [
            "cp /bin/busybox ./id",
            "chmod u+s ./id",
            "./id -u",
            "sh -c 'grep CapEff /proc/self/status'",
            "sh -c 'su -c id root </dev/null || echo NO-ROOT'",
        ]
    )
    out = texts(log, "out")
    assert "1000" in out and "CapEff:\t0000000000000000" in out and "NO-ROOT" in out
    hostile.still_serves()


def test_sleep_infinity_times_out_naming_the_command(hostile):
    job, log = hostile.run(["echo start", "sleep infinity"], extra="resources:\n  limits:\n    wall_seconds: 3\n")
    assert job["state"] == "timed_out"
    assert "timed out: 'sleep infinity' was running when the job hit its wall-time limit of 3 s" in texts(log, "sys")
    hostile.still_serves()


def test_per_command_limit(hostile):
    job, log = hostile.run(["sleep 30"], extra="resources:\n  limits:\n    command_seconds: 2\n")
    assert job["state"] == "timed_out"
    assert "timed out: 'sleep 30' hit the per-command limit of 2 s" in texts(log, "sys")


def test_process_ignoring_sigterm_is_killed(hostile):
    job, log = hostile.run(
        ["sh -c 'trap \"\" TERM INT HUP; while :; do sleep 1; done'"], extra="resources:\n  limits:\n    wall_seconds: 3\n"
    )
    assert job["state"] == "timed_out"
    hostile.still_serves()


def test_orphans_and_zombies_do_not_hold_the_job(hostile, docker_engine):
    job, log = hostile.run(["sh -c 'sleep 300 & sleep 300 & echo spawned'", "sh -c '(sleep 1 &) ; echo next'"], timeout=60)
    assert job["state"] == "succeeded" and texts(log, "out") == ["spawned", "next"]
    took = (
        __import__("datetime").datetime.fromisoformat(job["finished_at"]) - __import__("datetime").datetime.fromisoformat(job["started_at"])
    ).total_seconds()
    assert took < 30  # the background sleeps did not keep it open
    hostile.still_serves()


def test_killing_pid_1_ends_only_that_job(hostile):
    """Issue 32: the container's init and keepalive are root's, out of the job's reach: a job can no
    longer signal them at all (it once ended its own container with SIGTERM to PID 1, and a keepalive
    of its own user could be traced and turned into a loop that rewrote answers)."""
    job, log = hostile.run(
        [
            "sh -c 'kill -9 1 || echo refused-kill; sleep 1; echo survived-sigkill'",
            "sh -c 'kill -TERM 1 || echo refused-term; kill -STOP 1 || echo refused-stop; echo still-here'",
        ]
    )
    out = texts(log, "out")
    assert "survived-sigkill" in out and "refused-kill" in out and "refused-term" in out and "refused-stop" in out
    assert job["state"] == "succeeded" and "still-here" in out
    hostile.still_serves()


def test_another_jobs_files_do_not_exist_inside(hostile):
    first, _ = hostile.run(["sh -c 'echo TOPSECRET > /build/secret; echo TOPSECRET > /tmp/secret'"])
    job, log = hostile.run(
        [
            "sh -c 'cat /build/secret /tmp/secret 2>&1; ls /var/lib/rai-worker 2>&1; ls /var/run/docker.sock 2>&1;"
            " grep -rl TOPSECRET /build /tmp /src /home /root /var /opt /mnt /srv 2>/dev/null || echo NOT-FOUND'"
        ]
    )
    out = " ".join(texts(log, "out"))
    assert "TOPSECRET" not in out and "NOT-FOUND" in out
    assert "docker.sock: No such file or directory" in out
    hostile.still_serves()


def test_symlink_out_of_build_does_not_leak_host_files_into_the_build_folder(hostile):
    job, _ = hostile.run(["ln -s /etc/passwd pw", "ln -s /proc/self/environ env", "sh -c 'echo fine > ok.txt'"])
    assert job["state"] == "succeeded"
    r = hostile.http.get(f"/api/v1/jobs/{job['id']}/build.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        assert tar.getnames() == ["ok.txt"]  # absolute links are dropped on the way out
