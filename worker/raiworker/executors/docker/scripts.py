"""The shell scripts and commands rai runs inside a job's containers, and their exit statuses.

Each is one exec (each costs ~50 ms); they run as the job's user unless said otherwise.
"""

from __future__ import annotations

from ...lease import LEASE_EXIT, PAST_BOOT_SH
from ...terminal import IN_CONTAINER

# The container's first process under its init, as root (the job's user cannot signal it): it keeps
# the container up between execs and is the lease's watcher (issue 51). Once the stamp's time is
# past (the worker renewed no lease: paused, frozen, cut off) it exits LEASE_EXIT, init exits with
# it and the kernel kills every process of the container: no job's command outlives its lease,
# whatever became of the worker. The stamp's folder is the slot's (``workdir.lease_stamp``).
LEASE_IN_CONTAINER = "/opt/rai/lease"
KEEPALIVE = ["/bin/sh", "-c", f"STAMP={LEASE_IN_CONTAINER}/until; while :; do if {PAST_BOOT_SH}; then exit {LEASE_EXIT}; fi; sleep 1; done"]
# Kill every process of the job but init and the keepalive (init's first child), from inside, as the
# job's user: the container and its /build tmpfs survive for collection. A few passes catch forks
# (the keepalive's own `sleep`, root's, refuses the signal; COLLECT leaves it out by its parent).
KILL_JOB = (
    "keep=$(cut -d' ' -f1 /proc/1/task/1/children 2>/dev/null); "
    "for pass in 1 2 3; do for d in /proc/[0-9]*; do p=${d#/proc/}; "
    '[ "$p" -gt 1 ] && [ "$p" != "$keep" ] && [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null; done; done; true'
)
# At the job's end, one exec (each costs ~50 ms): kill the job's processes as above, prove none is
# left (one not yet reaped is a zombie, state Z after the last ') ' of its stat line, and runs
# nothing), then stream /build as a tar. Exit status LEFT_OVER says a process survived: the
# container is then killed before the job's end is reported; otherwise it is removed afterwards,
# when nobody waits for it.
LEFT_OVER = 99
COLLECT = (
    KILL_JOB.removesuffix("; true") + "; left=1; n=0; while [ $left = 1 ] && [ $n -lt 40 ]; do left=0; "
    'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" -gt 1 ] && [ "$p" != "$keep" ] && [ "$p" != "$$" ] && '
    'read -r st < "$d/stat" 2>/dev/null && s=${st##*) } && pp=${s#? } && pp=${pp%% *} && '
    'case "$s" in Z*) ;; *) [ "$pp" = "$keep" ] || { left=1; kill -9 "$p" 2>/dev/null; } ;; esac; done; '
    "[ $left = 1 ] && sleep 0.05; n=$((n+1)); done; "  # SIGKILL lands when the process next runs: wait up to 2 s
    f'tar -C /build -cf - .; t=$?; [ "$left" = 1 ] && exit {LEFT_OVER}; exit $t'
)
# The same, run by rai-pty in the exec of a job's last command once that command has ended
# (RAI_PTY_THEN): one exec less at every job's end; tar's complaints are not the job's output. Only
# a small /build is sent there: that exec's stream is written whether or not the worker reads it
# (a paused run's), and an engine asked to remove a container whose exec blocks on an unread
# stream took 10 s, time in which the job ran elsewhere too. A bigger one gets an exec of its own
# (the script ends with nothing sent, and the worker runs COLLECT), once the worker reads.
HANDOVER_BYTES = 64 * 1024
COLLECT_AFTER = "exec 2>/dev/null; " + COLLECT.replace(
    "tar -C /build -cf - .; t=$?",
    f'[ "$(tar -C /build -cf - . | head -c {HANDOVER_BYTES + 1} | wc -c)" -gt {HANDOVER_BYTES} ] && exit 98; tar -C /build -cf - .; t=$?',
)
# Between a ranked job's timed runs: every process of the job ended (as at the end), nothing copied
END_PROCESSES = COLLECT.rsplit("tar -C", 1)[0] + f'[ "$left" = 1 ] && exit {LEFT_OVER}; exit 0'
# Issue 50: where the container has the pty helper, the helper ends the job's processes and decides
# that none is left (``rai-pty --end-then``; after the last command, RAI_PTY_THEN), out of the
# job's reach: a shell doing it is dumpable, so a surviving process could attach to it, stop it or
# change what it reports. The shell scripts above stay for a container without the helper. The
# helper ends processes only with END_JOB_ENV in its environment (never on a worker's host, where
# the worker probes it).
END_JOB_ENV = {"RAI_PTY_END_JOB": "1"}
TAR_BUILD = "tar -C /build -cf - ."
TAR_KEPT = 'tar -C /build -cf - -- "$@"'
COLLECT_AFTER_HELPER = (
    f'exec 2>/dev/null; [ "$(tar -C /build -cf - . | head -c {HANDOVER_BYTES + 1} | wc -c)" -gt {HANDOVER_BYTES} ] && exit 98; ' + TAR_BUILD
)


def ending_job(helper: bool, tar: str, shell: str, args: tuple[str, ...] = ()) -> list[str]:
    """An exec's argv that ends every process of the job, then runs ``tar`` (with ``args`` as $1…):
    by the helper where the container has one (run it with END_JOB_ENV), else by the shell script
    ``shell``, which ends them itself."""
    if helper:
        return [IN_CONTAINER, "--end-then", tar, *args]
    return ["/bin/sh", "-c", shell, "sh", *args]


# Issue 32: a ranked run's timed runs each start in a fresh container from the build's result: the
# build's processes end, the files the course keeps are copied out (bounded like /build), and each
# timed container copies them into its own empty /build from a read-only folder
KEPT_IN_CONTAINER = "/opt/rai/kept"
KEEP_OUT = END_PROCESSES.rsplit('[ "$left" = 1 ]', 1)[0] + f'[ "$left" = 1 ] && exit {LEFT_OVER}; tar -C /build -cf - -- "$@"'
KEEP_IN = f"cp -a {KEPT_IN_CONTAINER}/. /build/"
# the capabilities rai-timed needs (as root in the timed container: become the job's user, freeze
# and kill its cgroup through files root owns); the job's own processes run as its user, with none
# and no way to gain one
TIMED_CAPS = ["KILL", "SETUID", "SETGID"]
# Root's folder in a timed run's container: a tmpfs of root's, mode 0700, mounted when the container
# is made, so it exists before any process of the job does and none can enter it (issue 34). The
# run's keys and rai-timed's result (a folder for each run in the container) and, at cg/, the
# timed runs' cgroup v2 folder are there (issue 46)
MEASURE_DIR = "/opt/rai/measure"
CGROUP_IN_CONTAINER = f"{MEASURE_DIR}/cg"
WRITE_KEYS = 'umask 077; mkdir "$1" && printf "%s %s\\n" "$2" "$3" > "$1/keys"'  # (folder, input key, check key)
# C25: the image's files the course forbids in timed runs ($@: find's "-name GLOB -o -name GLOB ..."),
# over $ROOTS (/ and the image's volumes), each by its real path (a symlink's target), and every
# other name of the same file (a hard link), a line each: the containers of the run get an empty
# file mounted over each of them
FORBIDDEN_FILES = (
    "command -v find >/dev/null && command -v readlink >/dev/null || exit 127; "
    "IFS=$(printf '\\n_'); IFS=${IFS%_}; "  # a line each: a name with a space stays one (and is refused as odd)
    'found=$(find $ROOTS -xdev \\( "$@" \\) ! -type d '
    '-exec sh -c \'for f; do r=$(readlink -f "$f") && [ -f "$r" ] && echo "$r"; done\' sh {} + 2>/dev/null | sort -u); '
    '[ -n "$found" ] || exit 0; set --; for r in $found; do set -- "$@" ${1:+-o} -samefile "$r"; done; '
    '{ echo "$found"; find $ROOTS -xdev -type f \\( "$@" \\) 2>/dev/null; } | sort -u; exit 0'
)
READ_LIMIT = 1024 * 1024
READ_RESULT = f'head -c {READ_LIMIT} "$1/result"'
