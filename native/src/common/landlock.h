/* Landlock, defined here so an older build host's headers do not limit the
 * rights we can ask a newer kernel for. */
#ifndef CV_LANDLOCK_H
#define CV_LANDLOCK_H

#include <stdint.h>

#define CV_LL_EXECUTE (1ull << 0)
#define CV_LL_WRITE_FILE (1ull << 1)
#define CV_LL_READ_FILE (1ull << 2)
#define CV_LL_READ_DIR (1ull << 3)
#define CV_LL_REMOVE_DIR (1ull << 4)
#define CV_LL_REMOVE_FILE (1ull << 5)
#define CV_LL_MAKE_CHAR (1ull << 6)
#define CV_LL_MAKE_DIR (1ull << 7)
#define CV_LL_MAKE_REG (1ull << 8)
#define CV_LL_MAKE_SOCK (1ull << 9)
#define CV_LL_MAKE_FIFO (1ull << 10)
#define CV_LL_MAKE_BLOCK (1ull << 11)
#define CV_LL_MAKE_SYM (1ull << 12)
#define CV_LL_REFER (1ull << 13)     /* ABI 2 */
#define CV_LL_TRUNCATE (1ull << 14)  /* ABI 3 */
#define CV_LL_IOCTL_DEV (1ull << 15) /* ABI 5 */

#define CV_LL_SCOPE_ABSTRACT_UNIX (1ull << 0) /* ABI 6 */
#define CV_LL_SCOPE_SIGNAL (1ull << 1)        /* ABI 6 */

struct cv_ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI 4 */
    uint64_t scoped;             /* ABI 6 */
};

struct cv_ll_path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

/* The running kernel's ABI version, 0 when Landlock is unavailable (errno set). */
int cv_landlock_abi(void);
/* Every filesystem right this ABI knows. */
uint64_t cv_landlock_fs_rights(int abi);
int cv_landlock_create(const struct cv_ll_ruleset_attr *attr, int abi);
int cv_landlock_add_path(int ruleset, int fd, uint64_t access);
int cv_landlock_restrict(int ruleset);

#endif
