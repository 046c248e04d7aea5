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
 * It also counts the CPU time of every process of the run, which all descend from its child (it
 * is their subreaper: orphans come back to it, not to init): the descendants reaped (rusage of
 * children) plus what the stopped ones used so far, with their own reaped children. Root's
 * processes (the profiler) are not counted. Written as seconds to CPU_FILE ("-": nowhere), a file
 * in a folder only root can enter.
 *
 * Usage: rai-timed UID GID CPU_FILE PROGRAM [ARGS...]      exit: the command's status (128+N for a signal)
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
#include <sys/prctl.h>
#include <sys/resource.h>
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

/* The fields after the command name of a process's stat line ("S 1 ..."), in ``buf``; NULL if it is gone. */
static const char *stat_fields(const char *pid, char *buf, size_t size) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close = strrchr(buf, ')');
    return close && close[1] == ' ' ? close + 2 : NULL;
}

/* Seconds of CPU a process used, its reaped children's included (fields 14-17 of its stat line). */
static double cpu_of(const char *pid) {
    char buf[1024];
    const char *p = stat_fields(pid, buf, sizeof buf);
    if (!p) return 0;
    /* state(3) ppid(4) pgrp(5) session(6) tty(7) tpgid(8) flags(9) minflt cminflt majflt cmajflt utime(14) stime cutime cstime */
    unsigned long long v[15] = {0};
    char state;
    if (sscanf(p, "%c %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &state, &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12], &v[13]) < 15)
        return 0;
    long tick = sysconf(_SC_CLK_TCK);
    return (double)(v[10] + v[11] + v[12] + v[13]) / (double)(tick > 0 ? tick : 100);
}

/* Whether the process runs (any state but stopped, traced, zombie or dead). */
static int running(const char *pid) {
    char buf[1024];
    const char *p = stat_fields(pid, buf, sizeof buf);
    return p && !(*p == 'T' || *p == 't' || *p == 'Z' || *p == 'X');
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

/* The CPU seconds of every process of ``uid`` still there (stopped or zombie), children included. */
static double cpu_left(uid_t uid) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    double total = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (isdigit((unsigned char)e->d_name[0]) && uid_of(e->d_name) == (long)uid) total += cpu_of(e->d_name);
    }
    closedir(d);
    return total;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: rai-timed UID GID CPU_FILE PROGRAM [ARGS...]\n");
        return 2;
    }
    uid_t uid = (uid_t)strtoul(argv[1], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[2], NULL, 10);
    const char *cpu_file = argv[3];
    if (uid == 0) {
        fprintf(stderr, "rai-timed: the job's user may not be root\n");
        return 2;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* the run's orphans come back here: their CPU is counted */
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
        execvp(argv[4], argv + 4);
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
    while (waitpid(-1, NULL, WNOHANG) > 0) { /* orphans that ended: their CPU joins the children's */
    }
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    cpu += cpu_left(uid);
    if (strcmp(cpu_file, "-") != 0) {
        FILE *f = fopen(cpu_file, "w");
        if (f) {
            fprintf(f, "%.3f\n", cpu);
            fclose(f);
        }
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 126;
}
