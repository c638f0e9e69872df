#include "landlock.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "common/sysnr.h"

#define CV_LL_CREATE_RULESET_VERSION (1u << 0)
#define CV_LL_RULE_PATH_BENEATH 1

int cv_landlock_abi(void) {
    long v = syscall(__NR_landlock_create_ruleset, NULL, 0, CV_LL_CREATE_RULESET_VERSION);
    return v < 0 ? 0 : (int)v;
}

uint64_t cv_landlock_fs_rights(int abi) {
    uint64_t r = (CV_LL_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
    if (abi >= 2) r |= CV_LL_REFER;
    if (abi >= 3) r |= CV_LL_TRUNCATE;
    if (abi >= 5) r |= CV_LL_IOCTL_DEV;
    return r;
}

int cv_landlock_create(const struct cv_ll_ruleset_attr *attr, int abi) {
    size_t size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
    return (int)syscall(__NR_landlock_create_ruleset, attr, size, 0);
}

int cv_landlock_add_path(int ruleset, int fd, uint64_t access) {
    struct cv_ll_path_beneath pb = {.allowed_access = access, .parent_fd = fd};
    return (int)syscall(__NR_landlock_add_rule, ruleset, CV_LL_RULE_PATH_BENEATH, &pb, 0);
}

int cv_landlock_restrict(int ruleset) {
    return (int)syscall(__NR_landlock_restrict_self, ruleset, 0);
}
