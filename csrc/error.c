/* error.c: the thread-local last-error message behind rc_status (robocache.h).
 * Kernels and launchers record why they failed; the CPython glue turns it into an exception. */
#include <stdarg.h>
#include <stdio.h>

#include "robocache.h"

static _Thread_local char last_error[512];

rc_status rc_fail(rc_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *rc_last_error(void) { return last_error; }
