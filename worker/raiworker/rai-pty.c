/* rai-pty: run one command with a pseudo-terminal as its stdout and another as its stderr.
 *
 * Programs line-buffer when stdout is a terminal (C stdio, C++ iostreams, CUDA's printf, Python),
 * so a job's output comes back as it is printed instead of when the program exits. Two terminals
 * keep stderr apart from stdout: what arrives on the first goes to this helper's stdout, the
 * second to its stderr, written as soon as it is read, so the executor (a pipe, or Docker's
 * multiplexed exec stream) sees both in the order they were printed.
 *
 * The terminals pass bytes unchanged (no \n -> \r\n), have the size given by COLUMNS and LINES,
 * and are not the command's controlling terminal: the command stays in this helper's process
 * group, so killing that group kills the job. The helper exits with the command's status (128+N
 * for a signal) as soon as the command ends, after draining what it had written; a background
 * child still holding the terminal does not keep the command running.
 *
 * RAI_PTY_THEN (a shell script) and RAI_PTY_END (a token) make the exec that runs a job's last
 * command also copy its /build out, saving the ~45 ms a second exec costs: once the command has
 * ended and its output is written, the helper writes "\0rai-end:TOKEN:STATUS\n" to its stdout and
 * becomes `sh -c SCRIPT`, whose stdout follows on the same stream. The token is the worker's, for
 * this exec: both variables are gone from the environment before the command starts, and the
 * helper cannot be traced or its /proc files read by the job's processes (not dumpable: the worker
 * installs it so that the job's user may run it but not read it, which makes it so from its first
 * instruction; the prctl below is for where that cannot be), so no output of the job can pass for
 * that line.
 *
 * Ending the job's processes (issue 50): before the script after the command (RAI_PTY_THEN), and in
 * `rai-pty --end-then SCRIPT [ARGS...]` (an exec of its own), the helper itself kills every process
 * of the job and waits until none is left but zombies (up to 2 s), then runs SCRIPT with sh. The
 * decision "every process is gone" is this helper's, which no process of the job can trace or
 * pause (a shell doing it was dumpable: a survivor could attach to it and stop it, or change what
 * it reported). With none left, nothing can attach to the script either. If one is left, the
 * script still runs (its tar keeps /build) as this helper's child, and the helper exits LEFT_OVER
 * (99) whatever the script's status. Spared: init (1), its first child (the container's keepalive,
 * root's) and that one's children, and this helper. Only with RAI_PTY_END_JOB set (the worker sets
 * it in a job container's exec); without it nothing is killed (the worker probes the helper on its
 * own host).
 *
 * Usage: rai-pty PROGRAM [ARGS...]    Static build: cc -O2 -static -o rai-pty rai-pty.c
 *        rai-pty --end-then SCRIPT [ARGS...]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t child_done = 0;

static void on_chld(int sig) { (void)sig; child_done = 1; }

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    int n = v ? atoi(v) : 0;
    return n > 0 && n < 10000 ? n : fallback;
}

/* A master/slave pair that passes bytes as written, sized like the job's terminal. */
static int open_pty(int *master, int *slave) {
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0) return -1;
    const char *name = ptsname(m);
    if (!name) return -1;
    int s = open(name, O_RDWR | O_NOCTTY);
    if (s < 0) return -1;
    struct termios t;
    if (tcgetattr(s, &t) == 0) {
        t.c_oflag &= ~OPOST;           /* no \n -> \r\n: the log gets what the program wrote */
        t.c_lflag &= ~(ECHO | ICANON);
        tcsetattr(s, TCSANOW, &t);
    }
    struct winsize ws = {.ws_row = (unsigned short)env_int("LINES", 40), .ws_col = (unsigned short)env_int("COLUMNS", 120)};
    ioctl(s, TIOCSWINSZ, &ws);
    fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
    *master = m;
    *slave = s;
    return 0;
}

/* A pipe in place of a terminal (read end non-blocking, as a master's). */
static int open_pipe(int *master, int *slave) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    *master = p[0];
    *slave = p[1];
    return 0;
}

static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* the reader went away: nothing more to do with this output */
        }
        buf += w;
        n -= (size_t)w;
    }
}

/* Output is gathered for up to BATCH_NS or BUF_SIZE bytes before it is written on: a program
 * printing line by line on a terminal makes one write per line, and passing millions of tiny
 * writes through a pipe (or Docker's exec stream) one by one costs far more than the output. */
#define BUF_SIZE 65536
#define BATCH_NS 5000000L

/* Once a batch holds GATHER_FROM bytes or more (output in bulk: a program printing line by line,
 * fast), the helper lets output gather on the terminals for up to GATHER_NS after each read that got
 * output on that stream alone, before it looks again: such a program otherwise wakes it (and the
 * kernel's terminal worker wakes it) every few lines. 1 ms, well inside the batch above, keeps
 * output as live. The other stream printing meanwhile ends the moment at once (what the busy one
 * wrote until then is read first), and output slower than that is read as it comes, so stdout and
 * stderr keep the order they were printed in. On the 2-core bench machine a job printing 2,000,000
 * lines ran 2-9% faster end to end with it (issue 38, bench/overhead-2core.txt). */
#define GATHER_FROM 4096
#define GATHER_NS 1000000L

/* RAI_PTY_FRAMES=1: both streams go to stdout as frames (8-byte header: stream 1 or 2, three zero
 * bytes, big-endian length; Docker's format), one file or pipe that keeps their order (Slurm jobs,
 * the process executor). Only the helper's own complaints go to its stderr. */
static int framed = 0;

struct out {
    int master, fd, open;
    size_t len;
    struct timespec due;
    char buf[BUF_SIZE];
};

static void flush_out(struct out *o) {
    if (o->len == 0) return;
    if (framed) {
        unsigned char h[8] = {(unsigned char)o->fd, 0, 0, 0, (unsigned char)(o->len >> 24), (unsigned char)(o->len >> 16),
                              (unsigned char)(o->len >> 8), (unsigned char)o->len};
        write_all(1, (const char *)h, 8);
        write_all(1, o->buf, o->len);
    } else {
        write_all(o->fd, o->buf, o->len);
    }
    o->len = 0;
}

static long ns_until(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (t->tv_sec - now.tv_sec) * 1000000000L + (t->tv_nsec - now.tv_nsec);
}

/* Read what is ready on o's terminal into its buffer (all of it when draining), writing the other
 * stream's pending bytes first so the two keep the order they were printed in. Returns how many
 * bytes it read. */
static size_t pump(struct out *o, struct out *other, int drain) {
    size_t got = 0;
    if (other->len) flush_out(other);
    for (;;) {
        if (o->len == BUF_SIZE) flush_out(o);
        ssize_t n = read(o->master, o->buf + o->len, BUF_SIZE - o->len);
        if (n > 0) {
            if (o->len == 0) {
                clock_gettime(CLOCK_MONOTONIC, &o->due);
                o->due.tv_nsec += BATCH_NS;
                if (o->due.tv_nsec >= 1000000000L) { o->due.tv_sec++; o->due.tv_nsec -= 1000000000L; }
            }
            o->len += (size_t)n;
            got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (drain) flush_out(o);
            return got;
        }
        flush_out(o); /* EIO: every slave descriptor is closed */
        o->open = 0;
        return got;
    }
}

/* A moment for more output to gather (GATHER_NS) while ``busy`` prints, never past a batch's due
 * time; the command's end (SIGCHLD, unblocked by wait_mask) cuts it short, and so does output on
 * ``quiet``: what ``busy`` wrote until then is read first, then ``quiet``'s. */
static void gather(struct out *busy, struct out *quiet, const sigset_t *wait_mask) {
    long ns = GATHER_NS;
    if (busy->len) { long d = ns_until(&busy->due); ns = d < ns ? d : ns; }
    if (quiet->len) { long d = ns_until(&quiet->due); ns = d < ns ? d : ns; }
    if (ns <= 0) return;
    struct timespec nap = {.tv_sec = 0, .tv_nsec = ns};
    struct pollfd other = {.fd = quiet->open ? quiet->master : -1, .events = POLLIN};
    if (ppoll(&other, 1, &nap, wait_mask) > 0 && other.revents) {
        if (busy->open) pump(busy, quiet, 0);
        pump(quiet, busy, 0);
    }
}

#define LEFT_OVER 99

/* The first number in a file (/proc/1/task/1/children: init's first child), or -1. */
static long first_number(const char *path) {
    char buf[64] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    char *end;
    long v = strtol(buf, &end, 10);
    return end == buf ? -1 : v;
}

/* State and parent of a process from /proc/PID/stat (after the last ')': its name may hold one). */
static int stat_of(long pid, char *state, long *ppid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *close_paren = strrchr(buf, ')');
    if (!close_paren || sscanf(close_paren + 1, " %c %ld", state, ppid) != 2) return -1;
    return 0;
}

/* Kill every process of the job and wait until none runs (zombies run nothing): 0 when none is
 * left, 1 when one still ran after 40 passes 50 ms apart. */
static int end_processes(void) {
    long self = (long)getpid(), keep = first_number("/proc/1/task/1/children");
    int left = 1;
    for (int pass = 0; pass < 40 && left; pass++) {
        left = 0;
        DIR *d = opendir("/proc");
        if (!d) return 1;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 1 || pid == self || pid == keep) continue;
            char state;
            long ppid;
            if (stat_of(pid, &state, &ppid) < 0 || state == 'Z' || (keep > 0 && ppid == keep)) continue;
            left = 1;
            kill((pid_t)pid, SIGKILL);
        }
        closedir(d);
        if (left) {
            struct timespec t = {0, 50 * 1000000L};
            nanosleep(&t, NULL);
        }
    }
    return left;
}

/* After the job's processes were ended: SCRIPT (with ARGS as $1…) in place of this helper when
 * none was left; else as its child, and LEFT_OVER whatever it returns. */
static int then_script(const char *script, char **args, int nargs, int left) {
    char *argv[nargs + 5];
    int k = 0;
    argv[k++] = "sh";
    argv[k++] = "-c";
    argv[k++] = (char *)script;
    argv[k++] = "sh";
    for (int i = 0; i < nargs; i++) argv[k++] = args[i];
    argv[k] = NULL;
    if (!left) {
        execv("/bin/sh", argv);
        return 126;
    }
    pid_t pid = fork();
    if (pid == 0) {
        execv("/bin/sh", argv);
        _exit(126);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* 98: the script sent nothing (a /build too large for this stream: the worker copies it in an
     * exec of its own, which ends the processes again); else what survived is said, whatever the
     * script (traceable by the survivor) returned */
    return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 98 ? 98 : LEFT_OVER;
}

int main(int argc, char **argv) {
    /* Ending processes only where the worker asks for it, in a job's container: never on a host
     * where the helper is probed (it would kill every process of the worker's user) */
    int end_job = getenv("RAI_PTY_END_JOB") != NULL;
    unsetenv("RAI_PTY_END_JOB");
    if (argc >= 3 && strcmp(argv[1], "--end-then") == 0) {
        prctl(PR_SET_DUMPABLE, 0);
        signal(SIGPIPE, SIG_DFL);
        return then_script(argv[2], argv + 3, argc - 3, end_job ? end_processes() : 0);
    }
    if (argc < 2) {
        fprintf(stderr, "usage: rai-pty PROGRAM [ARGS...]\n");
        return 2;
    }
    prctl(PR_SET_DUMPABLE, 0); /* the job's processes (its user) may not read this one's memory or environment */
    framed = env_int("RAI_PTY_FRAMES", 0) == 1;
    unsetenv("RAI_PTY_FRAMES"); /* the helper's, not the job's */
    char *then = NULL, *token = NULL;
    if (getenv("RAI_PTY_THEN") && getenv("RAI_PTY_END")) {
        then = strdup(getenv("RAI_PTY_THEN"));
        token = strdup(getenv("RAI_PTY_END"));
        char *left = getenv("RAI_PTY_END");
        memset(left, 'x', strlen(left)); /* unsetenv leaves the process's first copy in its memory */
    }
    unsetenv("RAI_PTY_THEN");
    unsetenv("RAI_PTY_END");
    int om = -1, os_ = -1, em = -1, es = -1;
    if (open_pty(&om, &os_) < 0 || open_pty(&em, &es) < 0) {
        /* No terminals here (no /dev/ptmx, or none left): run the command on plain pipes rather than
         * not at all; framed, through two pipes of this helper's, so that its output is frames all
         * the same (never the command's bare output where frames are read). */
        int fds[] = {om, os_, em, es};
        for (int i = 0; i < 4; i++)
            if (fds[i] >= 0) close(fds[i]);
        if (!framed) {
            execvp(argv[1], argv + 1);
            perror(argv[1]);
            return 127;
        }
        if (open_pipe(&om, &os_) < 0 || open_pipe(&em, &es) < 0) {
            perror("rai-pty: pipe");
            return 125;
        }
    }
    sigset_t block, orig;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &orig);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_chld;
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 125;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &orig, NULL);
        signal(SIGPIPE, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the helper killed: the command goes too */
        dup2(os_, 1);
        dup2(es, 2);
        if (os_ > 2) close(os_);
        if (es > 2) close(es);
        execvp(argv[1], argv + 1);
        fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
        _exit(127);
    }
    close(os_);
    close(es);

    static struct out out, err;
    out = (struct out){.master = om, .fd = 1, .open = 1};
    err = (struct out){.master = em, .fd = 2, .open = 1};
    int status = 0;
    sigset_t wait_mask = orig;
    sigdelset(&wait_mask, SIGCHLD);
    while (!child_done && (out.open || err.open)) {
        struct pollfd fds[2] = {{.fd = out.open ? om : -1, .events = POLLIN}, {.fd = err.open ? em : -1, .events = POLLIN}};
        struct timespec wait, *timeout = NULL;
        long ns = -1;
        if (out.len) ns = ns_until(&out.due);
        if (err.len) { long e = ns_until(&err.due); ns = ns < 0 || e < ns ? e : ns; }
        if (ns >= 0 || out.len || err.len) {
            if (ns < 0) ns = 0;
            wait.tv_sec = ns / 1000000000L;
            wait.tv_nsec = ns % 1000000000L;
            timeout = &wait;
        }
        int r = ppoll(fds, 2, timeout, &wait_mask);
        if (r > 0) {
            size_t got_out = 0, got_err = 0;
            if (fds[0].revents) got_out = pump(&out, &err, 0);
            if (fds[1].revents) got_err = pump(&err, &out, 0);
            if (got_out && !got_err && out.len >= GATHER_FROM) gather(&out, &err, &wait_mask);
            if (got_err && !got_out && err.len >= GATHER_FROM) gather(&err, &out, &wait_mask);
        }
        if (out.len && ns_until(&out.due) <= 0) flush_out(&out);
        if (err.len && ns_until(&err.due) <= 0) flush_out(&err);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* What the command wrote before it ended is still in the terminals' buffers. */
    if (out.open) pump(&out, &err, 1);
    if (err.open) pump(&err, &out, 1);
    flush_out(&out);
    flush_out(&err);
    int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    if (then != NULL && token != NULL) {
        char end[160];
        int n = snprintf(end, sizeof end, "%crai-end:%.64s:%d\n", 0, token, code);
        write_all(1, end, (size_t)n);
        close(om); /* what a background child still writes goes nowhere */
        close(em);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &orig, NULL);
        return then_script(then, NULL, 0, end_job ? end_processes() : 0); /* no tar after the end line: the worker copies /build with an exec of its own */
    }
    return code;
}
