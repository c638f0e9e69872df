#include "mem.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#define PAGE 4096u

/* Read page by page: a string may end right before an unmapped page. The first read is short
 * (most paths are): copying a whole page for a 20-byte path costs more than a second call. */
ssize_t cv_guest_read_str(pid_t tid, uint64_t addr, char *buf, size_t len) {
    if (!addr) return -EFAULT;
    size_t done = 0;
    while (done < len) {
        size_t chunk = PAGE - (size_t)((addr + done) % PAGE);
        if (done == 0 && chunk > 256) chunk = 256;
        if (chunk > len - done) chunk = len - done;
        struct iovec local = {buf + done, chunk};
        struct iovec remote = {(void *)(uintptr_t)(addr + done), chunk};
        ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
        if (n <= 0) return -EFAULT;
        char *nul = memchr(buf + done, 0, (size_t)n);
        if (nul) return (ssize_t)(nul - buf);
        done += (size_t)n;
    }
    return -ENAMETOOLONG;
}

int cv_guest_read(pid_t tid, uint64_t addr, void *buf, size_t len) {
    struct iovec local = {buf, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_readv(tid, &local, 1, &remote, 1, 0);
    return n == (ssize_t)len ? 0 : -EFAULT;
}

int cv_guest_write(pid_t tid, uint64_t addr, const void *buf, size_t len) {
    struct iovec local = {(void *)buf, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_writev(tid, &local, 1, &remote, 1, 0);
    return n == (ssize_t)len ? 0 : -EFAULT;
}
