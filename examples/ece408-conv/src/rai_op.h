// rai_op.h: the course harness's side of rai's timed operations (issue 46). Header only, C or C++.
//
// In a ranked run rai's supervisor (rai-timed, root in the container) gives the program a pipe for
// its marks (RAI_MARKS_OUT) and a socket for rai-timed's answers (RAI_MARKS_FD), and holds the
// clock, the inputs and the outputs:
//
//   float *y;  const float *in;
//   rai_op_prepare(n_in, n_out, &y);  // y: the outputs' memory (n_out floats, mapped and zeroed;
//                                     //    untimed). The inputs are drawn now, out of reach;
//                                     //    rai_op_inputs() is the (read-only) memory they will be
//                                     //    copied into at begin: zeros until then (page-lock it
//                                     //    and y for the GPU here, before the clock)
//   rai_op_begin(&in);                // the clock starts, then `in` (n_in floats, read-only) holds them
//   ... the operation: read in, write y ...
//   rai_op_end();                     // the clock stops once every thread of the job is frozen;
//                                     // y is fingerprinted then and checked against the course's
//                                     // reference on the same inputs after the run
//   rai_op_done();                    // (after the last, and after unpinning) the memory let go
//
// A run does the course's operations rai_op_passes() times over (the course's ranked.passes), each
// time on new inputs: every pass of every run is one sample of the ranked number. A later pass of
// an operation of the same sizes gets the same memory (*out, zeroed, and the inputs' memory) back,
// with new inputs: rai-timed settles the earlier operation first (its outputs checked, and compared
// with what was read at its freeze); mapping it afresh cost ~0.5 s a pass (bench/pass_cost.cu).
//
// Every one of the job's processes and threads counts between begin and end, whatever it does;
// nothing it does after end can change what is checked (a change is seen and the run not ranked).
// The inputs are uniform in [-1, 1), new for every operation of every run. Outside a ranked run
// (no RAI_MARKS_FD) rai_op_ranked() is 0 and the program runs as it always did.
#pragma once

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

static int rai_op_fd_ = -2, rai_op_out_ = -1;
static size_t rai_op_in_ = 0;
static const float *rai_op_inputs_ = NULL; /* the operation's inputs' memory, mapped at prepare */
/* the memory of the operations prepared so far, by their sizes, for a later pass of each */
#define RAI_OP_HELD 8
static struct {
  size_t in, out;
  int op; /* the operation (1, 2, …: rai-timed's count) that holds it now */
  float *y;
  const float *x;
} rai_op_held_[RAI_OP_HELD];
static int rai_op_count_ = 0; /* operations prepared so far */

/* Whether this is a ranked run (rai-timed gave it the marks' pipe and the answers' socket). */
static inline int rai_op_ranked(void) {
  if (rai_op_fd_ == -2) {
    const char *v = getenv("RAI_MARKS_FD"), *w = getenv("RAI_MARKS_OUT");
    rai_op_fd_ = v && *v && w && *w ? atoi(v) : -1;
    rai_op_out_ = w && *w ? atoi(w) : -1;
  }
  return rai_op_fd_ >= 0;
}

/* Send the mark ``msg`` (a line); wait for the one-letter answer ``want`` and the descriptors it
 * carries: ``fd`` and ``fd2`` (NULL: none expected). */
static inline int rai_op_ask2_(const char *msg, char want, int *fd, int *fd2) {
  char line[80];
  int len = snprintf(line, sizeof line, "%s\n", msg);
  if (len <= 0 || len >= (int)sizeof line || write(rai_op_out_, line, (size_t)len) != len) return -1;
  char got = 0;
  struct iovec iov = {&got, 1};
  union {
    char buf[CMSG_SPACE(2 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof u.buf;
  ssize_t n;
  do n = recvmsg(rai_op_fd_, &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n != 1 || got != want) return -1;
  const size_t want_fds = fd2 ? 2 : fd ? 1 : 0;
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  if (want_fds == 0) return c ? -1 : 0;
  if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(want_fds * sizeof(int))) return -1;
  memcpy(fd, CMSG_DATA(c), sizeof(int));
  if (fd2) memcpy(fd2, CMSG_DATA(c) + sizeof(int), sizeof(int));
  return 0;
}

static inline int rai_op_ask_(const char *msg, char want, int *fd) { return rai_op_ask2_(msg, want, fd, NULL); }

static inline void rai_op_die_(const char *what) {
  fprintf(stderr, "rai_op: %s failed (is this a ranked run of the course's harness?)\n", what);
  exit(3);
}

/* An operation of n_in input floats and n_out output floats; *out: where the outputs go. */
static inline void rai_op_prepare(size_t n_in, size_t n_out, float **out) {
  char msg[64];
  int fd = -1, in_fd = -1;
  int slot = -1;
  for (int i = 0; i < RAI_OP_HELD; i++) {
    if (rai_op_held_[i].op && rai_op_held_[i].in == n_in && rai_op_held_[i].out == n_out) { /* a later pass */
      snprintf(msg, sizeof msg, "Q %zu %zu %d", n_in, n_out, rai_op_held_[i].op);
      if (rai_op_ask_(msg, 'R', NULL) != 0) rai_op_die_("prepare");
      rai_op_held_[i].op = ++rai_op_count_;
      *out = rai_op_held_[i].y;
      rai_op_inputs_ = rai_op_held_[i].x;
      rai_op_in_ = n_in;
      return;
    }
    if (!rai_op_held_[i].op && slot < 0) slot = i;
  }
  snprintf(msg, sizeof msg, "Q %zu %zu", n_in, n_out);
  if (!rai_op_ranked() || rai_op_ask2_(msg, 'R', &fd, &in_fd) != 0) rai_op_die_("prepare");
  void *p = mmap(NULL, n_out * sizeof(float), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) rai_op_die_("mapping the outputs");
  memset(p, 0, n_out * sizeof(float)); /* every page in place before the clock runs */
  *out = (float *)p;
  void *q = mmap(NULL, n_in * sizeof(float), PROT_READ, MAP_SHARED | MAP_POPULATE, in_fd, 0);
  close(in_fd);
  if (q == MAP_FAILED) rai_op_die_("mapping the inputs");
  rai_op_inputs_ = (const float *)q;
  rai_op_in_ = n_in;
  ++rai_op_count_;
  if (slot >= 0) {
    rai_op_held_[slot].in = n_in;
    rai_op_held_[slot].out = n_out;
    rai_op_held_[slot].op = rai_op_count_;
    rai_op_held_[slot].y = (float *)p;
    rai_op_held_[slot].x = (const float *)q;
  }
}

/* The memory the prepared operation's inputs will be in (read-only; zeros until begin). */
static inline const float *rai_op_inputs(void) { return rai_op_inputs_; }

/* The clock starts; *in: the inputs, which exist from now on. */
static inline void rai_op_begin(const float **in) {
  if (rai_op_inputs_) { /* copied by rai-timed into the memory mapped at prepare */
    if (rai_op_ask_("B", 'G', NULL) != 0) rai_op_die_("begin");
    *in = rai_op_inputs_;
    return;
  }
  int fd = -1;
  if (rai_op_ask_("B", 'G', &fd) != 0) rai_op_die_("begin");
  void *p = mmap(NULL, rai_op_in_ * sizeof(float), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) rai_op_die_("mapping the inputs");
  *in = (const float *)p;
}

/* The clock stops (once every thread of the job is frozen); the outputs are taken as they are. */
static inline void rai_op_end(void) {
  if (rai_op_ask_("E", 'D', NULL) != 0) rai_op_die_("end");
}

/* After the run's last operation (and after unpinning): every operation's memory unmapped. */
static inline void rai_op_done(void) {
  for (int i = 0; i < RAI_OP_HELD; i++)
    if (rai_op_held_[i].op) {
      munmap(rai_op_held_[i].y, rai_op_held_[i].out * sizeof(float));
      munmap((void *)rai_op_held_[i].x, rai_op_held_[i].in * sizeof(float));
      rai_op_held_[i].op = 0;
    }
  rai_op_inputs_ = NULL;
}

/* How many times over a run does its operations (RAI_OP_PASSES, set by rai from the course's
 * ranked.passes; 1 without it). The course's reference does the same: a run that does other than
 * its reference does is not ranked. */
static inline int rai_op_passes(void) {
  const char *v = getenv("RAI_OP_PASSES");
  const int n = v && *v ? atoi(v) : 1;
  return n < 1 ? 1 : n > 64 ? 64 : n;
}

#ifdef __cplusplus
}
#endif
