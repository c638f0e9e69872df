/* Pseudo-terminals for interactive runs (cv_openpty, cv_pty_resize): made on the host side, so
 * the guest's terminal is one of its own and never the caller's. The caller keeps the master and
 * relays it; the slave becomes the guest's stdio and its session's controlling terminal
 * (cv_run_set_ctty, helper/init.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cvisor.h"

CV_API int cv_openpty(int fds[2], uint16_t cols, uint16_t rows) {
    if (!fds) return CV_ERR_INVALID;
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) return -errno;
    int unlock = 0;
    struct winsize ws = {.ws_row = rows ? rows : 24, .ws_col = cols ? cols : 80};
    int slave = -1;
    if (ioctl(master, TIOCSPTLCK, &unlock) < 0 || ioctl(master, TIOCSWINSZ, &ws) < 0 ||
        (slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        int e = errno;
        close(master);
        return -e;
    }
    fds[0] = master;
    fds[1] = slave;
    return 0;
}

CV_API int cv_pty_resize(int master_fd, uint16_t cols, uint16_t rows) {
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    return ioctl(master_fd, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}
