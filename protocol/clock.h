/* The one clock helper: time since an unspecified start, from
 * clock_gettime. Every duration, deadline and timestamp of pipetop is read
 * through it (messages keep their own origin, pt_msg_now_ns, on top). */
#ifndef PT_PROTOCOL_CLOCK_H
#define PT_PROTOCOL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t pt_clock_ns(void);
/* CLOCK_MONOTONIC in seconds. */
double pt_clock_s(void);
/* Any clock in seconds (CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID
 * for CPU time); 0 when the clock cannot be read. */
double pt_clock_of_s(clockid_t id);

#endif
