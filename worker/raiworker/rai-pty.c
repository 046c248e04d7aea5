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
 * Usage: rai-pty PROGRAM [ARGS...]    Static build: cc -O2 -static -o rai-pty rai-pty.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
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

static void write_all(int fd, const char *buf, ssize_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, (size_t)n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* the reader went away: nothing more to do with this output */
        }
        buf += w;
        n -= w;
    }
}

/* Copy what is ready on a master to fd (one read, or all of it when draining); return 0 when
 * that terminal is closed (EIO), else 1. One read at a time keeps a chatty stdout from starving
 * stderr. */
static int pump(int master, int fd, int drain) {
    char buf[65536];
    for (;;) {
        ssize_t n = read(master, buf, sizeof buf);
        if (n > 0) {
            write_all(fd, buf, n);
            if (drain) continue;
            return 1;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 1;
        return 0; /* EIO: every slave descriptor is closed */
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: rai-pty PROGRAM [ARGS...]\n");
        return 2;
    }
    int om, os_, em, es;
    if (open_pty(&om, &os_) < 0 || open_pty(&em, &es) < 0) {
        /* No terminals here (no /dev/ptmx): run the command on plain pipes rather than not at all. */
        execvp(argv[1], argv + 1);
        perror(argv[1]);
        return 127;
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

    int open_out = 1, open_err = 1, status = 0;
    sigset_t wait_mask = orig;
    sigdelset(&wait_mask, SIGCHLD);
    while (!child_done && (open_out || open_err)) {
        struct pollfd fds[2] = {{.fd = open_out ? om : -1, .events = POLLIN}, {.fd = open_err ? em : -1, .events = POLLIN}};
        int r = ppoll(fds, 2, NULL, &wait_mask);
        if (r < 0) continue; /* EINTR: SIGCHLD */
        if (fds[0].revents) open_out = pump(om, 1, 0);
        if (fds[1].revents) open_err = pump(em, 2, 0);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* What the command wrote before it ended is still in the terminals' buffers. */
    if (open_out) pump(om, 1, 1);
    if (open_err) pump(em, 2, 1);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
