/* rai-timed: run a ranked job's timed command as the job's user and, the moment it exits, stop
 * every process of the job's user in the container (issue 32), so that nothing of the job runs
 * between the end of the timed command and the service's reading of its answers and report: a
 * child left behind to write the answers "after" the run, or a loop that rewrites them after a
 * kill pass, is frozen where it stands before anything is read; the container is then killed.
 *
 * It runs as root in the container (with CAP_KILL, CAP_SETUID, CAP_SETGID; the job's processes
 * have no capability and cannot gain one) and only that uid's processes are stopped: rai's own
 * (root's profiler writing its report) go on. The job cannot signal, trace or replace it.
 *
 * Stopping is repeated until a whole scan of /proc finds every process of the uid stopped or
 * dead (a stopped process cannot fork, so a fork bomb converges): a process still running after
 * 2 s of passes makes it exit 70 with a line saying so.
 *
 * Usage: rai-timed UID GID PROGRAM [ARGS...]      exit: the command's status (128+N for a signal)
 * Static build: cc -O2 -static -o rai-timed rai-timed.c
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The real uid of a process, or -1 if it is gone. */
static long uid_of(const char *pid) {
    char path[300], line[256];
    snprintf(path, sizeof path, "/proc/%s/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long uid = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Uid:", 4) == 0) {
            uid = strtol(line + 4, NULL, 10);
            break;
        }
    }
    fclose(f);
    return uid;
}

/* Whether the process runs (any state but stopped, traced, zombie or dead). */
static int running(const char *pid) {
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close = strrchr(buf, ')');
    if (!close || close[1] != ' ') return 0;
    char state = close[2];
    return !(state == 'T' || state == 't' || state == 'Z' || state == 'X');
}

/* One pass: SIGSTOP to every running process of ``uid``; returns how many were running. */
static int stop_pass(uid_t uid) {
    DIR *d = opendir("/proc");
    if (!d) return -1;
    int left = 0;
    struct dirent *e;
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]) || strcmp(e->d_name, self) == 0) continue;
        if (uid_of(e->d_name) != (long)uid || !running(e->d_name)) continue;
        left++;
        kill((pid_t)atoi(e->d_name), SIGSTOP);
    }
    closedir(d);
    return left;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: rai-timed UID GID PROGRAM [ARGS...]\n");
        return 2;
    }
    uid_t uid = (uid_t)strtoul(argv[1], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[2], NULL, 10);
    if (uid == 0) {
        fprintf(stderr, "rai-timed: the job's user may not be root\n");
        return 2;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("rai-timed: fork");
        return 126;
    }
    if (child == 0) {
        if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0 || getuid() != uid || geteuid() != uid) {
            perror("rai-timed: cannot become the job's user");
            _exit(126);
        }
        execvp(argv[3], argv + 3);
        perror("rai-timed: exec");
        _exit(127);
    }
    signal(SIGTERM, SIG_IGN); /* the job's user cannot signal root anyway; a kill from rai is SIGKILL */
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("rai-timed: waitpid");
            return 126;
        }
    }
    /* the command ended: freeze the rest of the job now, before anything of it runs again */
    struct timespec pause = {0, 1000000}; /* 1 ms */
    int left = 1;
    for (int pass = 0; pass < 2000 && left != 0; pass++) {
        left = stop_pass(uid);
        if (left > 0) nanosleep(&pause, NULL);
    }
    if (left != 0) {
        fprintf(stderr, "rai-timed: a process of the job kept running after the timed command ended\n");
        return 70;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 126;
}
