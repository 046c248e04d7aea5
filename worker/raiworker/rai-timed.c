/* rai-timed: the supervisor of a ranked job's timed run (issues 32, 46). It holds the clock, the
 * inputs and the outputs; the job holds none of them.
 *
 * It runs as root in the timed run's container (with CAP_KILL, CAP_SETUID, CAP_SETGID only; the
 * job's processes run as the job's user, have no capability and cannot gain one): no process of
 * the job can signal, trace, patch or replace it. Every process of the run lives in a cgroup v2
 * folder of its own (--cgroup, made empty by the worker, reachable only from root's folder): the
 * run's first process moves itself there before it drops to the job's user, and whatever it
 * starts stays there (a fork, a clone with SIGCHLD ignored, a setsid daemon, a zombie leader's
 * threads). At the end the whole cgroup is frozen (cgroup.freeze: every thread of every
 * process), its CPU time read (cpu.stat: what every process used, reaped or not), then killed
 * (cgroup.kill) and waited for; only then are the outputs read, through nothing the job can
 * lease, lock or replace. Past --bound-ms the same happens and the run says so; so it does once
 * the cgroup's CPU time (cpu.stat, read every CPU_LOOK_MS) passes --cpu-budget-ms: a run doing its
 * work on the host's cores is stopped at the course's budget, not left to run to its bound.
 *
 * The marks (--secrets): the course's harness, linked into the job's program, times each
 * operation with one line at a time into a pipe (RAI_MARKS_OUT, fd 4; a pipe carries no
 * descriptor, so nothing the job sends can make root close a socket that lingers), and reads the
 * answers, which may carry a memfd, from a socket only rai-timed writes (RAI_MARKS_FD, fd 3, shut
 * for reading on rai-timed's side; rai_op.h is that side):
 *   "P <in> <out>"  prepare: rai-timed makes the operation's inputs (<in> floats, from a key the
 *                   job never sees) in a memfd the job cannot reach yet, and answers "R" with a
 *                   memfd for <out> floats of outputs, which the job maps before the clock runs;
 *   "Q <in> <out>"  prepare, as "P", and the answer "R" carries a second memfd, read-only: the
 *                   memory the inputs will be copied into at "B" (zeros until then), which the job
 *                   maps and page-locks for the GPU before the clock runs (the copies to the GPU
 *                   are then DMA at the bus's speed, not staged through the CPU, whose speed wanders);
 *   "Q <in> <out> <k>"  a later pass of operation k's (the same sizes): the memory op k's inputs
 *                   and outputs are in, which the job holds mapped and page-locked already, serves
 *                   this operation too, zeroed, with new inputs drawn for it; op k is settled first
 *                   (its outputs read once into root's copy, checked, and compared with what was
 *                   read at its freeze, both from that copy: a change since is reported as one
 *                   after its end mark). The answer "R" carries no descriptor.
 *                   (Mapping ECE 408's 0.57 GB afresh cost ~0.5 s a pass on the H200's VM, 4 KiB
 *                   page by page: bench/pass_cost.cu.)
 *   "B"             begin: rai-timed reads its clock, then answers "G" with the inputs (read-only,
 *                   sealed; after "Q": copied, after the clock started, into the memory the job
 *                   already holds): before this instant the inputs were unknowable to the job;
 *   "E"             end: rai-timed freezes the whole cgroup; once every thread is frozen it reads
 *                   a word at a keyed place of every page of the outputs (up to 16 threads, an
 *                   order drawn at prepare: ~2-3 ms for 450 MB on a 16-core host) and then reads
 *                   its clock: the operation's time is the difference, whatever ran meanwhile (host
 *                   threads, other processes, copies, kernels). A copy the GPU still makes into
 *                   the outputs (the freezer cannot stop it) either lands before its page is read,
 *                   inside the time, or after, and is seen at the end. Then it fingerprints the
 *                   outputs (a keyed hash per chunk), thaws and answers "D".
 * At the end, after the kill, the outputs are fingerprinted again: an output that changed after its
 * end mark (a thread, a process, or a GPU still writing after the clock stopped) is reported, and
 * the outputs are checked with a second key drawn by the worker and never shown to the job:
 * CHECK_SKETCHES random-sign sums, the sum of squares and CHECK_SAMPLES values at random places,
 * which the service compares with the same figures of the course's reference run on the same
 * inputs (raiprotocol.opcheck). Nothing the job prints or writes elsewhere is read.
 *
 * The result is written to --out/result, a folder only root can enter: "exit N", "cpu_usec N",
 * optional "bound MS", "cpu_budget MS" and "problem TEXT" lines (rai-timed's own words), and one "op" line per
 * operation (see write_result).
 *
 * Usage: rai-timed --uid U --gid G --cgroup DIR --out DIR [--secrets FILE] [--bound-ms N]
 *                  [--cpu-budget-ms N] [--max-bytes N] [--max-ops N] [--check-at-end 1] -- PROGRAM [ARGS...]
 * --max-bytes: the inputs and outputs of all the run's operations (4 GiB; an operation that serves a later pass adds
 * none): what rai-timed holds, and checks after the end, is bounded whatever the job asks for.
 * --check-at-end 1 (the course's reference runs): each operation's outputs are checked at its end mark.
 * exit: the command's status (128+N for a signal), 124 at the bound or the CPU budget, 125 when the run broke the
 * marks protocol, 126 on a setup failure (the line on stderr says which).
 * Static build: cc -O2 -static -o rai-timed rai-timed.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

#define MARKS_FD 3  /* rai-timed's answers to the job (a socket the job only reads) */
#define MARKS_OUT 4 /* the job's marks to rai-timed (a pipe: no descriptor can travel on it) */
#define PAGE_BYTES 4096u
#define MAX_OPS_LIMIT 256
#define CHECK_SKETCHES 8
#define CHECK_SAMPLES 16
#define CHUNK_BYTES (1u << 20)
#define READ_FACTOR 4LL /* every operation's outputs, a later pass's too, at most this many times --max-bytes: what root reads */
#define MAX_THREADS 16 /* rai-timed's threads for work over the outputs or the inputs */
#define CPU_LOOK_MS 50 /* how often the CPU budget is looked at: a run overspends it by at most this x its cores */
#define FREEZE_NS 2000000000LL /* a cgroup not frozen after 2 s: something of the job runs on */

/* -- keyed randomness: SipHash-2-4 (a PRF: its outputs tell nothing of the key) and splitmix64 -- */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                                           \
    do {                                                                                                                                   \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                                                          \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                                                             \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                                                             \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                                                          \
    } while (0)

/* SipHash-2-4 of one 64-bit word under the 128-bit key k. */
static uint64_t siphash(const uint64_t k[2], uint64_t m) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k[0], v1 = 0x646f72616e646f6dULL ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ULL ^ k[0], v3 = 0x7465646279746573ULL ^ k[1];
    uint64_t b = 8ULL << 56;
    v3 ^= m; SIPROUND; SIPROUND; v0 ^= m;
    v3 ^= b; SIPROUND; SIPROUND; v0 ^= b;
    v2 ^= 0xff; SIPROUND; SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Domains of the keyed draws: one key never gives the same stream twice. */
enum { D_INPUT = 1, D_ORDER = 2, D_CHUNK = 3, D_SKETCH = 4, D_SAMPLE = 5 };
static uint64_t draw(const uint64_t k[2], uint64_t domain, uint64_t op, uint64_t i) {
    return siphash(k, (domain << 56) ^ (op << 40) ^ i);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* -- the run's state ------------------------------------------------------------------------------ */
struct op {
    uint64_t in_n, out_n;       /* floats */
    int in_fd, out_fd;          /* memfds (in_fd until it is handed over) */
    unsigned char *in_src;      /* "Q": the drawn inputs (root's own memory), copied at begin into */
    unsigned char *in_dst;      /*   the job's inputs' memory (mapped by it, and page-locked, at prepare) */
    int state;                  /* 0 prepared, 1 begun, 2 ended */
    char kind;                  /* its prepare mark, 'P' or 'Q': written on its op line ("via") */
    int64_t t0, t1;             /* rai-timed's clock at begin, and once the cgroup froze after end */
    long long cpu0, cpu1;       /* the cgroup's CPU microseconds at those instants */
    uint32_t nchunks;
    uint64_t *hashes;           /* the outputs' fingerprint per chunk, taken while frozen after end */
    uint32_t *words;            /* a word at a keyed place of every page, read first after the freeze */
    uint32_t *order;            /* the pages in the order they are read then, drawn at prepare */
    uint32_t *at;               /* where in each of those pages (its word's index), drawn then too */
    unsigned char *view;        /* rai-timed's own mapping of the outputs, every page mapped at prepare
                                 * (writable: a later pass's outputs are zeroed by rai-timed) */
    char *checked;              /* its checks, once taken: at its end mark (--check-at-end), or when */
    int changed;                /*   a later pass took its memory; then, whether it changed since its freeze */
};

static struct {
    uid_t uid;
    gid_t gid;
    const char *cgroup, *out_dir, *secrets;
    long long bound_ms, cpu_budget_ms, max_bytes, bytes_used;
    long long outputs_total;    /* every operation's outputs, a later pass's too: at most READ_FACTOR x max_bytes */
    unsigned char *snap;        /* a settled operation's outputs, copied once (settle) */
    size_t snap_bytes;
    int max_ops, check_at_end;
    uint64_t in_key[2], check_key[2];
    int procs_fd, freeze_fd, kill_fd, events_fd, cpu_fd;
    struct op ops[MAX_OPS_LIMIT];
    int nops;
    char problem[300];
    int bound_hit, cpu_hit;
} R = {.bound_ms = 0, .cpu_budget_ms = 0, .max_bytes = 4LL << 30, .max_ops = 64};

static void problem(const char *fmt, ...) {
    if (R.problem[0]) return; /* the first says why */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R.problem, sizeof R.problem, fmt, ap);
    va_end(ap);
}

static int open_in(const char *dir, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return open(path, flags | O_CLOEXEC);
}

static int write_str(int fd, const char *s) {
    return pwrite(fd, s, strlen(s), 0) == (ssize_t)strlen(s) ? 0 : -1;
}

/* The value of ``key`` in a flat-keyed cgroup file ("key value" lines), -1 if absent. */
static long long keyed(int fd, const char *key) {
    char buf[2048];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    size_t len = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, len) == 0 && line[len] == ' ') return strtoll(line + len + 1, NULL, 10);
    }
    return -1;
}

static long long cpu_usec(void) { return keyed(R.cpu_fd, "usage_usec"); }

/* Freeze every thread of every process of the run; returns once the kernel says frozen (or 2 s). */
/* bench/ranked_op_gpu.py's noise mode builds with -DRAI_TIMED_TRACE: where the end mark's time goes */
#ifdef RAI_TIMED_TRACE
#define TRACE_AT(v) int64_t v = now_ns()
#define TRACE(...) fprintf(stderr, __VA_ARGS__)
#else
#define TRACE_AT(v) (void)0
#define TRACE(...) (void)0
#endif

static int freeze(void) {
    if (write_str(R.freeze_fd, "1") != 0) return -1;
    int64_t start = now_ns();
    for (long spin = 0;; spin++) {
        if (keyed(R.events_fd, "frozen") == 1) return 0;
        if (now_ns() - start > FREEZE_NS) return -1;
        if (spin > 200) {
            struct timespec t = {0, 20000};
            nanosleep(&t, NULL);
        }
    }
}

static void thaw(void) { write_str(R.freeze_fd, "0"); }

/* -- outputs: fingerprints and checks ------------------------------------------------------------ */
/* A keyed NH hash of one chunk: the key stream is unknown to the job, so no change it makes to the
 * outputs after its end mark can keep a chunk's fingerprint (odds of 2^-32 per chunk). */
static uint64_t chunk_hash(const unsigned char *p, size_t len, uint64_t seed) {
    uint64_t h = len, s = seed;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w, k = splitmix(&s);
        memcpy(&w, p + i, 8);
        h += (uint64_t)((uint32_t)w + (uint32_t)k) * (uint64_t)((uint32_t)(w >> 32) + (uint32_t)(k >> 32));
    }
    if (i < len) {
        uint64_t w = 0, k = splitmix(&s);
        memcpy(&w, p + i, len - i);
        h += (uint64_t)((uint32_t)w + (uint32_t)k) * (uint64_t)((uint32_t)(w >> 32) + (uint32_t)(k >> 32));
    }
    return h;
}

static int threads_for(uint64_t pages);
static void in_parallel(void *(*fn)(void *), void *parts, size_t size, int n);

struct chunks_part {
    const struct op *o;
    int index;
    const uint32_t *order;
    uint32_t from, to; /* [from, to) of ``order`` */
    uint64_t *into;
};

static void *hash_chunks(void *arg) {
    const struct chunks_part *c = arg;
    size_t bytes = c->o->out_n * 4;
    for (uint32_t i = c->from; i < c->to; i++) {
        uint32_t k = c->order[i];
        size_t off = (size_t)k * CHUNK_BYTES, len = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
        c->into[k] = chunk_hash(c->o->view + off, len, draw(R.check_key, D_CHUNK, (uint64_t)c->index, k));
    }
    return NULL;
}

/* Every chunk's fingerprint, visited in an order drawn from the check key (a late writer cannot
 * aim at the chunks read last), by up to MAX_THREADS threads, each a stretch of that order (one
 * thread took ~0.1 s for ECE 408's 450 MB, at each end mark and again when a later pass took the
 * memory: most of a pass's cost once the memory was reused). ``into``: where to put them. */
static int fingerprint(struct op *o, int index, uint64_t *into) {
    uint32_t *order = malloc(sizeof(uint32_t) * o->nchunks);
    if (!order) return -1;
    for (uint32_t c = 0; c < o->nchunks; c++) order[c] = c;
    uint64_t s = draw(R.check_key, D_ORDER, (uint64_t)index, (uint64_t)now_ns());
    for (uint32_t c = o->nchunks; c > 1; c--) {
        uint32_t j = (uint32_t)(splitmix(&s) % c), t = order[c - 1];
        order[c - 1] = order[j];
        order[j] = t;
    }
    int n = threads_for(o->out_n * 4 / PAGE_BYTES);
    if ((uint32_t)n > o->nchunks) n = (int)o->nchunks;
    struct chunks_part part[MAX_THREADS];
    for (int t = 0; t < n; t++)
        part[t] = (struct chunks_part){o, index, order, (uint32_t)((uint64_t)o->nchunks * (uint64_t)t / (uint64_t)n),
                                       (uint32_t)((uint64_t)o->nchunks * (uint64_t)(t + 1) / (uint64_t)n), into};
    in_parallel(hash_chunks, part, sizeof part[0], n);
    free(order);
    return 0;
}

/* The keyed place of page ``page``'s word (a word-aligned offset within the page). */
static size_t word_at(int index, uint64_t page, size_t bytes) {
    size_t off = (size_t)page * PAGE_BYTES + (size_t)(draw(R.check_key, D_CHUNK, (uint64_t)index, page | (1ULL << 39)) % (PAGE_BYTES / 4)) * 4;
    return off + 4 <= bytes ? off : (bytes - 4) & ~(size_t)3;
}

/* Threads for work over ``pages`` pages done while the clock runs (reading the outputs, copying
 * the inputs): one per CPU this process may use, at most MAX_THREADS, one for small work. */
static int threads_for(uint64_t pages) {
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return pages < 1024 ? 1 : cores > MAX_THREADS ? MAX_THREADS : cores < 1 ? 1 : cores;
}

/* rai-timed's helper threads, started once, after the job's process (never forked with them) and
 * before any mark: work done while an operation's clock runs (the inputs copied in at begin, the
 * outputs' pages read at end) then only wakes them. Started for each piece of work, they cost
 * ~0.4-0.8 ms of the clock an operation, and spread it (bench/h200-run-offset-2026-11-29.txt). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long round; /* a new piece of work */
    int workers, pending;
    pthread_t owner; /* the thread that started the pool: the only one that hands it work */
    void *(*fn)(void *);
    char *parts;
    size_t size;
    int n;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void *pool_worker(void *arg) {
    int id = (int)(intptr_t)arg; /* 1..workers: part id of each piece of work */
    unsigned long seen = 0;
    pthread_mutex_lock(&P.mu);
    for (;;) {
        while (P.round == seen) pthread_cond_wait(&P.go, &P.mu);
        seen = P.round;
        if (id >= P.n) continue;
        void *(*fn)(void *) = P.fn;
        void *part = P.parts + (size_t)id * P.size;
        pthread_mutex_unlock(&P.mu);
        fn(part);
        pthread_mutex_lock(&P.mu);
        if (--P.pending == 0) pthread_cond_signal(&P.done);
    }
    return NULL;
}

static void pool_start(int workers) {
    P.owner = pthread_self();
    for (int id = 1; id <= workers && id < MAX_THREADS; id++) {
        pthread_t t;
        if (pthread_create(&t, NULL, pool_worker, (void *)(intptr_t)id) != 0) break;
        pthread_detach(t);
        P.workers = id;
    }
    /* fewer: the work is done all the same, more slowly (the run's time says so); the worker's log keeps why */
    if (P.workers < workers && P.workers < MAX_THREADS - 1)
        fprintf(stderr, "rai-timed: %d of %d helper threads started\n", P.workers, workers);
}

/* fn on each of n parts (``size`` bytes apart), at once: the caller does the first, the pool's
 * threads the others (a part beyond the pool, the caller after its own). */
static void in_parallel(void *(*fn)(void *), void *parts, size_t size, int n) {
    int pooled = n - 1 < P.workers ? n - 1 : P.workers;
    if (pooled > 0 && !pthread_equal(pthread_self(), P.owner)) pooled = 0; /* from a pool thread: it would wait on itself */
    if (pooled > 0) {
        pthread_mutex_lock(&P.mu);
        P.fn = fn;
        P.parts = parts;
        P.size = size;
        P.n = pooled + 1;
        P.pending = pooled;
        P.round++;
        pthread_cond_broadcast(&P.go);
        pthread_mutex_unlock(&P.mu);
    }
    fn(parts);
    for (int t = pooled + 1; t < n; t++) fn((char *)parts + (size_t)t * size);
    if (pooled > 0) {
        pthread_mutex_lock(&P.mu);
        while (P.pending > 0) pthread_cond_wait(&P.done, &P.mu);
        pthread_mutex_unlock(&P.mu);
    }
}

struct words_part {
    const struct op *o;
    int index;
    uint32_t *into;
    const uint32_t *order, *at;
    uint64_t from, to;
};

static void *read_words(void *arg) {
    const struct words_part *w = arg;
    size_t bytes = w->o->out_n * 4;
    for (uint64_t i = w->from; i < w->to; i++) {
        uint64_t page = w->order ? w->order[i] : i;
        size_t off = w->at ? (size_t)w->at[i] * 4 : word_at(w->index, page, bytes);
        uint32_t v;
        memcpy(&v, w->o->view + off, 4); /* mapped at prepare: reads only, no fault */
        w->into[page] = v;
    }
    return NULL;
}

/* A word of every page, in the order drawn at prepare (``order`` with the places ``at``, or page by
 * page without), read by up to MAX_THREADS threads at once: the first thing done after the freeze,
 * so that a write still landing in the outputs (a GPU's copy) is seen unless it lands within a
 * few milliseconds. */
static int page_words(struct op *o, int index, uint32_t *into, const uint32_t *order, const uint32_t *at) {
    uint64_t pages = (o->out_n * 4 + PAGE_BYTES - 1) / PAGE_BYTES;
    int n = threads_for(pages);
    struct words_part part[MAX_THREADS];
    for (int t = 0; t < n; t++)
        part[t] = (struct words_part){o, index, into, order, at, pages * (uint64_t)t / (uint64_t)n, pages * (uint64_t)(t + 1) / (uint64_t)n};
    in_parallel(read_words, part, sizeof part[0], n);
    return 0;
}

/* The checks the service compares with the reference run's: random-sign sums (each estimates the
 * L2 norm of the difference from the reference), the sum of squares, values at random places.
 * Sketch s is sum(v * (2 b - 1)) = 2 sum(v * b) - sum(v), b a random bit per output: per block of
 * 64 outputs, one 64-bit draw per sketch, and 8-wide products with the bits' 0/1 patterns (a
 * table) that the compiler can vectorize. */
static float BITS[256][8];

#define CHECK_SEGMENT 16384 /* blocks of 64 outputs summed together: sums independent of the threads */
#define SPLITMIX_GAMMA 0x9E3779B97F4A7C15ULL

struct sums {
    double sk[CHECK_SKETCHES], norm2, total;
    uint64_t nonfinite;
};

struct checks_part {
    const float *y;
    uint64_t n;                    /* outputs */
    const uint64_t *st;            /* each sketch's draw state before block 0 */
    struct sums *seg;              /* one per segment */
    uint64_t from, to;             /* segments */
};

/* Segments [from, to): block b's draw for sketch s is splitmix's (b + 1)th from st[s], so any
 * thread can start anywhere. */
static void *check_segments(void *arg) {
    const struct checks_part *c = arg;
    float blk[64];
    for (uint64_t g = c->from; g < c->to; g++) {
        struct sums *out = &c->seg[g];
        uint64_t st[CHECK_SKETCHES];
        for (int s = 0; s < CHECK_SKETCHES; s++) st[s] = c->st[s] + g * CHECK_SEGMENT * SPLITMIX_GAMMA;
        const uint64_t first = g * CHECK_SEGMENT * 64, last = first + CHECK_SEGMENT * 64 < c->n ? first + CHECK_SEGMENT * 64 : c->n;
        for (uint64_t i = first; i < last; i += 64) {
            uint64_t m = last - i < 64 ? last - i : 64;
            float sum = 0, sq = 0;
            for (uint64_t j = 0; j < 64; j++) {
                float v = j < m ? c->y[i + j] : 0.0f;
                if (!isfinite(v)) {
                    out->nonfinite++;
                    v = 0;
                }
                blk[j] = v;
                sum += v;
                sq += v * v;
            }
            out->total += sum;
            out->norm2 += sq;
            for (int s = 0; s < CHECK_SKETCHES; s++) {
                uint64_t bits = splitmix(&st[s]);
                float acc[8] = {0};
                for (int k = 0; k < 8; k++) {
                    const float *pattern = BITS[(bits >> (8 * k)) & 255], *x = blk + 8 * k;
                    for (int l = 0; l < 8; l++) acc[l] += x[l] * pattern[l];
                }
                out->sk[s] += (double)acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
            }
        }
    }
    return NULL;
}

/* On up to MAX_THREADS threads (the job is gone by then: ~0.2 s on one for the 450 MB of ECE 408's
 * outputs, each pass of each run); the segments' sums added in their order. */
static void checks(FILE *f, struct op *o, int index) {
    const float *y = (const float *)(const void *)o->view;
    for (int b = 0; b < 256; b++)
        for (int l = 0; l < 8; l++) BITS[b][l] = (float)((b >> l) & 1);
    uint64_t st[CHECK_SKETCHES];
    for (int s = 0; s < CHECK_SKETCHES; s++) st[s] = draw(R.check_key, D_SKETCH, (uint64_t)index, (uint64_t)s);
    const uint64_t segments = (o->out_n + CHECK_SEGMENT * 64 - 1) / (CHECK_SEGMENT * 64);
    struct sums *seg = calloc(segments, sizeof *seg);
    if (!seg) {
        fprintf(f, " nonfinite 0 norm2 nan");
        return;
    }
    int n = threads_for(o->out_n * 4 / PAGE_BYTES);
    if ((uint64_t)n > segments) n = (int)segments;
    struct checks_part part[MAX_THREADS];
    for (int t = 0; t < n; t++)
        part[t] = (struct checks_part){y, o->out_n, st, seg, segments * (uint64_t)t / (uint64_t)n, segments * (uint64_t)(t + 1) / (uint64_t)n};
    in_parallel(check_segments, part, sizeof part[0], n);
    struct sums all = {{0}, 0, 0, 0};
    for (uint64_t g = 0; g < segments; g++) {
        for (int s = 0; s < CHECK_SKETCHES; s++) all.sk[s] += seg[g].sk[s];
        all.norm2 += seg[g].norm2;
        all.total += seg[g].total;
        all.nonfinite += seg[g].nonfinite;
    }
    free(seg);
    fprintf(f, " nonfinite %" PRIu64 " norm2 %.17g sketch", all.nonfinite, all.norm2);
    for (int s = 0; s < CHECK_SKETCHES; s++) fprintf(f, " %.17g", 2 * all.sk[s] - all.total);
    fprintf(f, " samples");
    for (int j = 0; j < CHECK_SAMPLES; j++) {
        uint64_t at = draw(R.check_key, D_SAMPLE, (uint64_t)index, (uint64_t)j) % o->out_n;
        fprintf(f, " %" PRIu64 ":%.9g", at, (double)y[at]);
    }
}

/* -- the marks protocol ---------------------------------------------------------------------------- */
/* The answer ``msg`` with ``n`` descriptors (0-2). */
static int send_fds(int sock, const char *msg, const int *fds, int n) {
    struct iovec iov = {(void *)msg, strlen(msg)};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (n > 0) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
    }
    /* never blocks: a job that does not read its answers is told so, it cannot hold rai-timed */
    if (sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return problem("the run did not take rai's answer to its mark"), -1;
    return 0;
}

static int send_fd(int sock, const char *msg, int fd) { return send_fds(sock, msg, &fd, fd >= 0 ? 1 : 0); }

/* A read-only descriptor of memfd ``fd`` (the job maps it, and cannot write through it). */
static int read_only(int fd) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static int memfd(const char *name, size_t bytes) {
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The operation's inputs, uniform in [-1, 1) with 24 bits each (exact as floats), two from each
 * keyed draw of a PRF (SipHash of the pair's number under the input key): no number of inputs the
 * job sees tells it any other. (They were one splitmix64 stream from a keyed seed: four floats gave
 * its state and with it every input of the operation, on the fly, so a GPU kernel could make its
 * inputs instead of reading them, and start before rai-timed's copy ended: the hostile review.)
 * Drawn by up to MAX_THREADS threads, before the clock: ~10 ms for 92 MB on 16 cores. */
struct inputs_part {
    float *x;
    uint64_t n, op, from, to; /* pairs [from, to) */
};

static void *draw_pairs(void *arg) {
    const struct inputs_part *p = arg;
    for (uint64_t k = p->from; k < p->to; k++) {
        uint64_t z = draw(R.in_key, D_INPUT, p->op, k), i = 2 * k;
        p->x[i] = (float)((double)(z >> 40) * 0x1p-23 - 1.0);
        if (i + 1 < p->n) p->x[i + 1] = (float)((double)(z & 0xffffff) * 0x1p-23 - 1.0);
    }
    return NULL;
}

static void draw_inputs(float *x, uint64_t n, uint64_t op) {
    uint64_t pairs = (n + 1) / 2;
    int threads = threads_for(n * 4 / PAGE_BYTES);
    struct inputs_part part[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        part[t] = (struct inputs_part){x, n, op, pairs * (uint64_t)t / (uint64_t)threads, pairs * (uint64_t)(t + 1) / (uint64_t)threads};
    in_parallel(draw_pairs, part, sizeof part[0], threads);
}

static int read_places(struct op *o, int index);
static int prepare_job_inputs(int sock, struct op *o);
static int prepare_again(int sock, uint64_t in_n, uint64_t out_n, int k);

/* "P <in> <out>": the operation's inputs, drawn now from the input key (the job sees them only
 * after "B"), and its outputs' memfd, which the job gets at once. "Q <in> <out>": the same, and the
 * job also gets at once, read-only, the memory its inputs will be copied into at "B" (mapped, and
 * page-locked for the GPU's copies, before the clock runs; what it holds until then is zeros). */
static int prepare(int sock, const char *msg) {
    unsigned long long in_n, out_n;
    char kind, extra;
    unsigned again = 0;
    int got = sscanf(msg, "%c %llu %llu %u %c", &kind, &in_n, &out_n, &again, &extra);
    if (got == 4 && again > MAX_OPS_LIMIT) again = 0; /* no such operation: refused below */
    if (!(got == 3 || (got == 4 && kind == 'Q')) || in_n == 0 || out_n == 0)
        return problem("the run broke the marks protocol (a prepare without two sizes)"), -1;
    const unsigned long long in_copies = kind == 'Q' ? 2 : 1; /* "Q": rai-timed's and the job's */
    if (R.nops > 0 && R.ops[R.nops - 1].state != 2)
        return problem("the run broke the marks protocol (operation %d prepared before the last one ended)", R.nops + 1), -1;
    if (R.nops >= R.max_ops) return problem("the run timed more than %d operations", R.max_ops), -1;
    if (out_n > (unsigned long long)(READ_FACTOR * R.max_bytes - R.outputs_total) / 4)
        return problem("the run's operations asked for more than %lld bytes of outputs in all", READ_FACTOR * R.max_bytes), -1;
    R.outputs_total += (long long)(out_n * 4);
    if (got == 4) return prepare_again(sock, in_n, out_n, (int)again);
    if (in_n > (unsigned long long)R.max_bytes / 8 || out_n > (unsigned long long)R.max_bytes / 4 ||
        (in_copies * in_n + out_n) * 4 > (unsigned long long)(R.max_bytes - R.bytes_used))
        return problem("the run's operations asked for more than %lld bytes of inputs and outputs in all", R.max_bytes), -1;
    R.bytes_used += (long long)((in_copies * in_n + out_n) * 4);
    struct op *o = &R.ops[R.nops];
    memset(o, 0, sizeof *o);
    o->in_n = in_n;
    o->out_n = out_n;
    o->kind = kind;
    o->in_fd = -1;
    o->out_fd = memfd("rai-outputs", out_n * 4);
    if (o->out_fd < 0) return problem("operation %d: no memory for its outputs", R.nops + 1), -1;
    if (kind == 'P') { /* the inputs' memfd, handed over at begin: they can never change (the job, or a
                        * reference computed later, sees what was drawn) */
        o->in_fd = memfd("rai-inputs", in_n * 4);
        float *x = o->in_fd < 0 ? MAP_FAILED : mmap(NULL, in_n * 4, PROT_READ | PROT_WRITE, MAP_SHARED, o->in_fd, 0);
        if (x == MAP_FAILED) return problem("operation %d: no memory for its inputs", R.nops + 1), -1;
        draw_inputs(x, in_n, (uint64_t)R.nops);
        munmap(x, in_n * 4);
        if (fcntl(o->in_fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
            return problem("operation %d: its memory could not be sealed", R.nops + 1), -1;
    } else { /* "Q": drawn into root's own memory, copied into the job's at begin */
        o->in_src = mmap(NULL, in_n * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (o->in_src == MAP_FAILED) {
            o->in_src = NULL;
            return problem("operation %d: no memory for its inputs", R.nops + 1), -1;
        }
        draw_inputs((float *)(void *)o->in_src, in_n, (uint64_t)R.nops);
    }
    /* the outputs can be neither shrunk (a reader would fault) nor grown */
    if (fcntl(o->out_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        return problem("operation %d: its memory could not be sealed", R.nops + 1), -1;
    o->view = mmap(NULL, out_n * 4, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, o->out_fd, 0);
    if (o->view == MAP_FAILED) return problem("operation %d: no memory for its outputs", R.nops + 1), -1;
    if (read_places(o, R.nops) != 0) return problem("operation %d: no memory", R.nops + 1), -1;
    R.nops++;
    if (kind == 'P') return send_fd(sock, "R", o->out_fd);
    return prepare_job_inputs(sock, o);
}

/* The operation's fingerprint's and first reads' places: which word of each page is read at its
 * freeze, and in which order the pages are (drawn now, from the check key). */
static int read_places(struct op *o, int index) {
    uint64_t out_n = o->out_n;
    o->nchunks = (uint32_t)((out_n * 4 + CHUNK_BYTES - 1) / CHUNK_BYTES);
    o->hashes = calloc(o->nchunks, sizeof(uint64_t));
    uint64_t pages = (out_n * 4 + PAGE_BYTES - 1) / PAGE_BYTES;
    o->words = calloc(pages, sizeof(uint32_t));
    o->order = malloc(pages * sizeof(uint32_t));
    o->at = malloc(pages * sizeof(uint32_t));
    if (!o->hashes || !o->words || !o->order || !o->at) return -1;
    uint64_t shuffle = draw(R.check_key, D_ORDER, (uint64_t)index, (uint64_t)now_ns() | (1ULL << 62));
    for (uint64_t i = 0; i < pages; i++) o->order[i] = (uint32_t)i;
    for (uint64_t i = pages; i > 1; i--) {
        uint64_t j = splitmix(&shuffle) % i;
        uint32_t t = o->order[i - 1];
        o->order[i - 1] = o->order[j];
        o->order[j] = t;
    }
    for (uint64_t i = 0; i < pages; i++) o->at[i] = (uint32_t)(word_at(index, o->order[i], out_n * 4) / 4);
    return 0;
}

/* "Q": the job's inputs' memory, every page written once now, so that neither the job's mapping
     * nor the copy at begin faults. Sealed: no one can shrink it (the copy would fault) or grow it,
     * and only the mapping rai-timed holds can write it (F_SEAL_FUTURE_WRITE: a memfd is mode 0777,
     * so the job could reopen its read-only descriptor for writing through /proc/self/fd, but could
     * then neither map it writable, write nor punch holes in it). */
static int prepare_job_inputs(int sock, struct op *o) {
    uint64_t in_n = o->in_n;
    int job_fd = memfd("rai-inputs-job", in_n * 4);
    if (job_fd < 0) return problem("operation %d: no memory for its inputs", R.nops), -1;
    void *dst = mmap(NULL, in_n * 4, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, job_fd, 0);
    if (dst == MAP_FAILED) {
        close(job_fd);
        return problem("operation %d: no memory for its inputs", R.nops), -1;
    }
    memset(dst, 0, in_n * 4);
    o->in_dst = dst;
    if (fcntl(job_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
        close(job_fd);
        return problem("operation %d: its inputs' memory could not be sealed", R.nops), -1;
    }
    int fds[2] = {o->out_fd, read_only(job_fd)};
    close(job_fd);
    if (fds[1] < 0) return problem("operation %d: its inputs could not be opened", R.nops), -1;
    int rc = send_fds(sock, "R", fds, 2);
    close(fds[1]);
    return rc;
}

struct fill_part {
    unsigned char *to;
    const unsigned char *from; /* NULL: zeros */
    size_t bytes;
};

static void *fill_part(void *arg) {
    const struct fill_part *c = arg;
    if (c->from) memcpy(c->to, c->from, c->bytes);
    else memset(c->to, 0, c->bytes);
    return NULL;
}

/* ``bytes`` at ``to`` copied from ``from`` (NULL: zeroed), by up to MAX_THREADS threads: "Q"'s
 * inputs into the job's memory at begin (~2-3 ms for ECE 408's 92 MB layer, inside the operation's
 * time, since anything of the job, a thread or a GPU kernel reading mapped memory, may read them
 * from the first byte written), a settled operation's outputs into root's copy, a later pass's
 * outputs zeroed. */
static void fill(unsigned char *to, const unsigned char *from, size_t bytes) {
    size_t pages = (bytes + PAGE_BYTES - 1) / PAGE_BYTES;
    int n = threads_for(pages);
    struct fill_part part[MAX_THREADS];
    for (int t = 0; t < n; t++) {
        size_t a = pages * (size_t)t / (size_t)n * PAGE_BYTES, b = pages * (size_t)(t + 1) / (size_t)n * PAGE_BYTES;
        if (b > bytes) b = bytes;
        part[t] = (struct fill_part){to + a, from ? from + a : NULL, b > a ? b - a : 0};
    }
    in_parallel(fill_part, part, sizeof part[0], n);
}

/* "B": the clock starts, then the inputs are handed over (read-only): their memfd ("P"), or copied
 * into the memory the job mapped at prepare ("Q"). */
static int begin(int sock) {
    struct op *o = R.nops ? &R.ops[R.nops - 1] : NULL;
    if (!o || o->state != 0) return problem("the run broke the marks protocol (a begin without a prepare)"), -1;
    int ro = o->in_dst ? -1 : read_only(o->in_fd);
    if (!o->in_dst && ro < 0) return problem("operation %d: its inputs could not be opened", R.nops), -1;
    o->cpu0 = cpu_usec();
    o->t0 = now_ns();
    o->state = 1;
    TRACE_AT(b0);
    if (o->in_dst) fill(o->in_dst, o->in_src, o->in_n * 4);
    TRACE("TIMED begin %d: copy %.3f ms\n", R.nops, (double)(now_ns() - b0) / 1e6);
    int rc = send_fd(sock, "G", ro);
    if (ro >= 0) close(ro);
    close(o->in_fd);
    o->in_fd = -1;
    return rc;
}

/* The operation's checks, taken now (--check-at-end: at its end mark, while the run is frozen; the
 * course's reference, whose code is trusted), unless taken already. */
static int check_now(struct op *o, int index) {
    if (o->checked) return 0;
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    if (!m) return -1;
    checks(m, o, index);
    if (fclose(m) != 0 || !line) return -1;
    o->checked = line;
    return 0;
}

/* Whether operation ``index``'s outputs differ from what was read at its freeze (its fingerprint and
 * the word of each page read first): a thread, a process or a GPU still writing after its clock
 * stopped. 1 also when they cannot be read. */
static int changed_since_freeze(struct op *o, int index) {
    uint64_t pages = (o->out_n * 4 + PAGE_BYTES - 1) / PAGE_BYTES;
    uint64_t *now = calloc(o->nchunks, sizeof(uint64_t));
    uint32_t *words = calloc(pages, sizeof(uint32_t));
    int changed = !now || !words || fingerprint(o, index, now) != 0 || memcmp(now, o->hashes, sizeof(uint64_t) * o->nchunks) != 0 ||
                  page_words(o, index, words, NULL, NULL) != 0 || memcmp(words, o->words, sizeof(uint32_t) * pages) != 0;
    free(now);
    free(words);
    return changed;
}

/* Operation ``index`` settled before a later pass takes its memory. Its outputs are read once, into
 * root's own copy, and both its checks and the comparison with what was read at its freeze are
 * made from that copy: whatever the job (a thread, or a GPU copy the freezer cannot stop) writes
 * meanwhile, what is checked is what is compared. (Read twice, the checks and then the comparison,
 * a job could put late work in place for the checks and the frozen bytes back for the comparison:
 * the hostile review of 2026-11-29.) */
static int settle(struct op *o, int index) {
    if (o->checked) return 0; /* --check-at-end: checked while frozen */
    size_t bytes = o->out_n * 4;
    if (R.snap_bytes < bytes) {
        if (R.snap) munmap(R.snap, R.snap_bytes);
        R.bytes_used -= (long long)R.snap_bytes;
        R.snap = NULL;
        R.snap_bytes = 0;
        if ((long long)bytes > R.max_bytes - R.bytes_used) return -1;
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m == MAP_FAILED) return -1;
        R.snap = m;
        R.snap_bytes = bytes;
        R.bytes_used += (long long)bytes;
    }
    fill(R.snap, o->view, bytes);
    unsigned char *live = o->view;
    o->view = R.snap;
    int rc = check_now(o, index);
    o->changed = changed_since_freeze(o, index);
    o->view = live;
    return rc;
}

/* "Q <in> <out> <k>": operation k's memory (its inputs', its outputs', root's drawn inputs') serves
 * this operation, a later pass of k's, once k is settled; new inputs are drawn into it now. The job
 * keeps its mappings (and their page-locking): no descriptor is sent, and nothing new is held. */
static int prepare_again(int sock, uint64_t in_n, uint64_t out_n, int k) {
    struct op *old = k >= 1 && k <= R.nops ? &R.ops[k - 1] : NULL;
    if (!old || old->state != 2 || old->kind != 'Q' || !old->view || !old->in_dst || !old->in_src || old->in_n != in_n || old->out_n != out_n)
        return problem("the run broke the marks protocol (operation %d's memory cannot serve operation %d)", k, R.nops + 1), -1;
    if (settle(old, k - 1) != 0) return problem("operation %d: its outputs could not be read (no memory to copy them)", k), -1;
    free(old->hashes); /* settled: what its freeze read is needed no more */
    free(old->words);
    free(old->order);
    free(old->at);
    old->hashes = NULL;
    old->words = old->order = old->at = NULL;
    struct op *o = &R.ops[R.nops];
    memset(o, 0, sizeof *o);
    o->in_n = in_n;
    o->out_n = out_n;
    o->kind = 'Q';
    o->in_fd = -1;
    o->out_fd = old->out_fd;
    o->view = old->view;
    o->in_src = old->in_src;
    o->in_dst = old->in_dst;
    old->out_fd = -1;
    old->view = NULL;
    old->in_src = old->in_dst = NULL;
    if (read_places(o, R.nops) != 0) return problem("operation %d: no memory", R.nops + 1), -1;
    fill(o->view, NULL, out_n * 4); /* as a new operation's: its outputs' memory starts as zeros */
    draw_inputs((float *)(void *)o->in_src, in_n, (uint64_t)R.nops);
    R.nops++;
    return send_fds(sock, "R", NULL, 0);
}

/* "E": the clock stops once every thread of the run is frozen; the outputs are fingerprinted. */
static int end_mark(int sock) {
    struct op *o = R.nops ? &R.ops[R.nops - 1] : NULL;
    if (!o || o->state != 1) return problem("the run broke the marks protocol (an end without a begin)"), -1;
    TRACE_AT(e0);
    if (freeze() != 0) return problem("operation %d: the job could not be frozen at its end mark", R.nops), -1;
    TRACE_AT(e1);
    /* the clock stops once every page of the outputs has been read once: a write still landing (a
     * GPU's copy, which the freezer cannot stop) before its page is read is inside the time, one
     * after it is seen at the end; nothing done after the clock stopped can reach what is checked */
    int rc = page_words(o, R.nops - 1, o->words, o->order, o->at);
    o->t1 = now_ns();
    TRACE("TIMED op %d: end mark to frozen %.3f ms, pages read %.3f ms\n", R.nops, (double)(e1 - e0) / 1e6,
          (double)(o->t1 - e1) / 1e6);
    o->cpu1 = cpu_usec();
    o->state = 2;
    /* "P": the inputs' memfd went to the job at begin, rai-timed holds it no more. "Q": root's drawn
     * inputs and the job's inputs' memory are kept, for a later pass of this operation's */
    if (o->kind == 'P') R.bytes_used -= (long long)(o->in_n * 4);
    if (rc == 0 && R.check_at_end) rc = check_now(o, R.nops - 1);
    else if (rc == 0) rc = fingerprint(o, R.nops - 1, o->hashes);
    thaw();
    if (rc != 0) return problem("operation %d: its outputs could not be read", R.nops), -1;
    return send_fd(sock, "D", -1);
}

/* One mark, a line without its newline (any process of the job may write there: the protocol, not
 * the writer, is checked). */
static int on_mark(int sock, const char *msg) {
    if (msg[0] == 'P' || msg[0] == 'Q') return prepare(sock, msg);
    if (!strcmp(msg, "B")) return begin(sock);
    if (!strcmp(msg, "E")) return end_mark(sock);
    problem("the run broke the marks protocol (an unknown mark)");
    return -1;
}

/* What the pipe holds now: each whole line is a mark. 1: the job closed it; -1: the protocol broke. */
static int on_marks(int in, int sock) {
    static char buf[256];
    static size_t have = 0;
    ssize_t n = read(in, buf + have, sizeof buf - 1 - have);
    if (n == 0) return 1;
    if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : 1;
    have += (size_t)n;
    char *nl;
    while ((nl = memchr(buf, '\n', have)) != NULL) {
        *nl = 0;
        int rc = on_mark(sock, buf);
        size_t used = (size_t)(nl - buf) + 1;
        memmove(buf, nl + 1, have - used);
        have -= used;
        if (rc != 0) return -1;
    }
    if (have >= sizeof buf - 1) return problem("the run broke the marks protocol (a mark too long)"), -1;
    return 0;
}

/* -- the end ------------------------------------------------------------------------------------- */
static void write_result(int status, long long cpu) {
    char path[4096];
    snprintf(path, sizeof path, "%s/result", R.out_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        perror("rai-timed: result");
        return;
    }
    fprintf(f, "exit %d\ncpu_usec %lld\n", status, cpu);
    if (R.bound_hit) fprintf(f, "bound %lld\n", R.bound_ms);
    if (R.cpu_hit) fprintf(f, "cpu_budget %lld\n", R.cpu_budget_ms);
    if (R.problem[0]) fprintf(f, "problem %s\n", R.problem);
    /* op INDEX IN OUT NS CPU_USEC CHANGED nonfinite N norm2 X sketch S1..S8 samples AT:V x16 via P|Q */
    for (int i = 0; i < R.nops; i++) {
        struct op *o = &R.ops[i];
        if (o->state != 2) {
            fprintf(f, "op %d %" PRIu64 " %" PRIu64 " unended\n", i + 1, o->in_n, o->out_n);
            continue;
        }
        /* checked already (at its end mark, --check-at-end: the reference's, trusted; or settled
         * before a later pass took its memory, and compared then), or now that the job is gone */
        int changed = o->checked ? o->changed : changed_since_freeze(o, i);
        fprintf(f, "op %d %" PRIu64 " %" PRIu64 " %lld %lld %d", i + 1, o->in_n, o->out_n, (long long)(o->t1 - o->t0),
                o->cpu1 >= 0 && o->cpu0 >= 0 ? o->cpu1 - o->cpu0 : -1, changed);
        if (o->checked) fputs(o->checked, f);
        else checks(f, o, i);
        fprintf(f, " via %c\n", o->kind);
    }
    fclose(f);
}

/* Freeze, count, kill, wait: nothing of the job runs once this returns. */
static long long end_everything(void) {
    if (freeze() != 0) problem("a process of the job could not be frozen after the timed command ended");
    long long cpu = cpu_usec();
    write_str(R.kill_fd, "1");
    int64_t start = now_ns();
    while (keyed(R.events_fd, "populated") != 0 && now_ns() - start < 10000000000LL) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
        write_str(R.kill_fd, "1");
    }
    if (keyed(R.events_fd, "populated") != 0) problem("a process of the job survived the kill of its cgroup");
    thaw();
    while (waitpid(-1, NULL, WNOHANG) > 0) { /* orphans the kill ended */
    }
    return cpu;
}

static int read_secrets(const char *path) {
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    char a[40], b[40];
    int ok = fscanf(f, "%32s %32s", a, b) == 2 && strlen(a) == 32 && strlen(b) == 32;
    fclose(f);
    if (!ok) return -1;
    char part[17] = {0};
    for (int i = 0; i < 2; i++) {
        memcpy(part, a + 16 * i, 16);
        R.in_key[i] = strtoull(part, NULL, 16);
        memcpy(part, b + 16 * i, 16);
        R.check_key[i] = strtoull(part, NULL, 16);
    }
    return 0;
}

static int setup_failed(const char *what) {
    fprintf(stderr, "rai-timed: %s: %s\n", what, strerror(errno));
    return 126;
}

int main(int argc, char **argv) {
    int a = 1;
    long long uid = -1, gid = -1;
    for (; a < argc && strcmp(argv[a], "--") != 0; a += 2) {
        const char *k = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!v) break;
        if (!strcmp(k, "--uid")) uid = atoll(v);
        else if (!strcmp(k, "--gid")) gid = atoll(v);
        else if (!strcmp(k, "--cgroup")) R.cgroup = v;
        else if (!strcmp(k, "--out")) R.out_dir = v;
        else if (!strcmp(k, "--secrets")) R.secrets = v;
        else if (!strcmp(k, "--bound-ms")) R.bound_ms = atoll(v);
        else if (!strcmp(k, "--cpu-budget-ms")) R.cpu_budget_ms = atoll(v);
        else if (!strcmp(k, "--max-bytes")) R.max_bytes = atoll(v);
        else if (!strcmp(k, "--max-ops")) R.max_ops = atoi(v);
        else if (!strcmp(k, "--check-at-end")) R.check_at_end = atoi(v) != 0;
        else break;
    }
    if (a >= argc - 1 || strcmp(argv[a], "--") != 0 || uid < 0 || gid < 0 || !R.cgroup || !R.out_dir) {
        fprintf(stderr, "usage: rai-timed --uid U --gid G --cgroup DIR --out DIR [--secrets FILE] [--bound-ms N] "
                        "[--cpu-budget-ms N] [--max-bytes N] [--max-ops N] [--check-at-end 1] -- PROGRAM [ARGS...]\n");
        return 2;
    }
    char **command = argv + a + 1;
    if (uid == 0) {
        fprintf(stderr, "rai-timed: the job's user may not be root\n");
        return 2;
    }
    R.uid = (uid_t)uid;
    R.gid = (gid_t)gid;
    if (R.max_ops < 1 || R.max_ops > MAX_OPS_LIMIT) R.max_ops = MAX_OPS_LIMIT;
    if (R.secrets && read_secrets(R.secrets) != 0) return setup_failed("the run's keys");
    R.procs_fd = open_in(R.cgroup, "cgroup.procs", O_WRONLY);
    R.freeze_fd = open_in(R.cgroup, "cgroup.freeze", O_WRONLY);
    R.kill_fd = open_in(R.cgroup, "cgroup.kill", O_WRONLY);
    R.events_fd = open_in(R.cgroup, "cgroup.events", O_RDONLY);
    R.cpu_fd = open_in(R.cgroup, "cpu.stat", O_RDONLY);
    if (R.procs_fd < 0 || R.freeze_fd < 0 || R.kill_fd < 0 || R.events_fd < 0 || R.cpu_fd < 0)
        return setup_failed("the job's cgroup (cgroup v2, made by the worker)");
    if (keyed(R.events_fd, "populated") != 0) {
        fprintf(stderr, "rai-timed: the job's cgroup is not empty\n");
        return 126;
    }
    int sv[2] = {-1, -1}, marks[2] = {-1, -1};
    if (R.secrets) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0 || pipe2(marks, O_CLOEXEC) != 0) return setup_failed("socketpair");
        /* the job may only read the answers: it can send nothing (no descriptor) on this socket */
        if (shutdown(sv[0], SHUT_RD) != 0) return setup_failed("shutdown");
        fcntl(marks[0], F_SETFL, O_NONBLOCK);
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* the run's orphans come back here to be reaped */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, SIG_IGN); /* the job's user cannot signal root anyway; a kill from rai is SIGKILL */
    int64_t started = now_ns();
    pid_t child = fork();
    if (child < 0) return setup_failed("fork");
    if (child == 0) {
        /* into the run's cgroup first, while still root: everything it starts stays there */
        if (write(R.procs_fd, "0", 1) != 1) {
            perror("rai-timed: cannot enter the job's cgroup");
            _exit(126);
        }
        if (R.secrets) {
            if (dup2(sv[1], MARKS_FD) != MARKS_FD || dup2(marks[1], MARKS_OUT) != MARKS_OUT) _exit(126);
            setenv("RAI_MARKS_FD", "3", 1);
            setenv("RAI_MARKS_OUT", "4", 1);
        } else {
            unsetenv("RAI_MARKS_FD");
            unsetenv("RAI_MARKS_OUT");
        }
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        if (setgroups(0, NULL) != 0 || setgid(R.gid) != 0 || setuid(R.uid) != 0 || getuid() != R.uid || geteuid() != R.uid) {
            perror("rai-timed: cannot become the job's user");
            _exit(126);
        }
        execvp(command[0], command);
        perror("rai-timed: exec");
        _exit(127);
    }
    if (R.secrets) {
        close(sv[1]);
        close(marks[1]);
        pool_start(threads_for(UINT64_MAX) - 1);
    }
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    if (pidfd < 0) return setup_failed("pidfd_open");
    int status = 0, ended = 0, sock = R.secrets ? sv[0] : -1, in = R.secrets ? marks[0] : -1;
    while (!ended) {
        struct pollfd p[2] = {{pidfd, POLLIN, 0}, {in, POLLIN, 0}};
        int timeout = -1;
        if (R.bound_ms > 0) {
            long long left = R.bound_ms - (now_ns() - started) / 1000000;
            if (left <= 0) {
                R.bound_hit = 1;
                break;
            }
            timeout = left > 1000 ? 1000 : (int)left;
        }
        if (R.cpu_budget_ms > 0 && (timeout < 0 || timeout > CPU_LOOK_MS)) timeout = CPU_LOOK_MS;
        int n = poll(p, in >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR) break;
        if (R.cpu_budget_ms > 0 && cpu_usec() > R.cpu_budget_ms * 1000) {
            R.cpu_hit = 1;
            break;
        }
        if (n <= 0) continue;
        if (in >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            int rc = on_marks(in, sock);
            if (rc < 0) break; /* a broken protocol ends the run: it does not rank */
            if (rc > 0) {
                close(in);
                in = -1;
            }
        }
        if (p[0].revents & POLLIN) ended = 1;
    }
    if (ended && waitpid(child, &status, 0) != child) status = -1; /* before the kill: its own status */
    long long cpu = end_everything();
    if (!ended) waitpid(child, NULL, 0);
    int code = R.bound_hit || R.cpu_hit ? 124 : !ended ? 125 : WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 126;
    if (R.bound_hit) problem("the timed run was stopped at its bound of %lld ms", R.bound_ms);
    if (R.cpu_hit)
        problem("the timed run was stopped once its processes had used %.3g s of CPU time, more than the course's budget of %.3g s",
                cpu / 1e6, R.cpu_budget_ms / 1e3);
    write_result(code, cpu);
    if (R.problem[0]) fprintf(stderr, "rai-timed: %s\n", R.problem);
    return code;
}
