/* Reading the guest's memory. Always follow a read with cv_notif_valid()
 * before acting on it: the thread may have died and its tid been reused. */
#ifndef CV_GUEST_MEM_H
#define CV_GUEST_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* NUL-terminated string at addr in tid's memory. Returns length, -EFAULT, -ENAMETOOLONG. */
ssize_t cv_guest_read_str(pid_t tid, uint64_t addr, char *buf, size_t len);
/* Exactly len bytes at addr. Returns 0 or -EFAULT. */
int cv_guest_read(pid_t tid, uint64_t addr, void *buf, size_t len);
/* Write exactly len bytes at addr (a result buffer the guest passed). Returns 0 or -EFAULT. */
int cv_guest_write(pid_t tid, uint64_t addr, const void *buf, size_t len);

#endif
