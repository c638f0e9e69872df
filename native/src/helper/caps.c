/* Root guests: the filesystem is guarded by Landlock and the supervisor, but
 * capabilities like NET_ADMIN, SYS_ADMIN or SYS_TIME act on the host outside
 * the filesystem. Keep Docker's default set minus MKNOD, NET_RAW, SETFCAP, SETPCAP. */
#include <errno.h>
#include <stdint.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy.h"

static const int keep[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
                           CAP_FSETID, CAP_KILL,         CAP_SETGID,          CAP_SETUID,
                           CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_AUDIT_WRITE};

static int kept(int cap) {
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (keep[i] == cap) return 1;
    return 0;
}

int cv_drop_capabilities(void) {
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {{0}};
    if (syscall(SYS_capget, &hdr, data) < 0) return -errno;
    if (!data[0].permitted && !data[1].permitted) return 0; /* unprivileged: nothing to drop */
    for (int cap = 0; cap < 64; cap++) {
        if (kept(cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL) break;
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    uint32_t mask[2] = {0, 0};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) mask[keep[i] / 32] |= 1u << (keep[i] % 32);
    for (int i = 0; i < 2; i++) {
        data[i].effective &= mask[i];
        data[i].permitted &= mask[i];
        data[i].inheritable = 0;
    }
    if (syscall(SYS_capset, &hdr, data) < 0) return -errno;
    return 0;
}
