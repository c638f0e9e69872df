/* The status pipe between cvisor-helper (the sandbox's init) and the
 * supervisor: fixed-size records, each written with one write(2) (< PIPE_BUF,
 * so never interleaved). */
#ifndef CV_PROTO_H
#define CV_PROTO_H

#include <stdint.h>

#define CV_HELPER_STATUS_FD 3 /* helper → supervisor records */
#define CV_HELPER_GO_FD 4     /* supervisor → helper: one byte once the listener is taken */

enum cv_rec_type {
    CV_REC_LISTENER = 1,    /* a = the listener fd number inside the helper */
    CV_REC_SETUP_FAILED,    /* a = cv_error, b = errno, text = what */
    CV_REC_EXEC_FAILED,     /* a = errno of execvp */
    CV_REC_EXIT,            /* a = wait status of the main guest process, b = others left, rusage */
};

struct cv_rec {
    int32_t type;
    int32_t a, b;
    int32_t pad_;
    int64_t utime_us, stime_us, maxrss_kb;
    char text[160];
};

#endif
