/* Constants of the argument rules, shared by the reference evaluator and the
 * BPF compiler so the two cannot disagree on a value. */
#ifndef CV_FILTER_RULES_H
#define CV_FILTER_RULES_H

#include <stdint.h>

#define CV_CLONE_NEW_MASK                                                              \
    (0x00020000u /* NEWNS */ | 0x02000000u /* NEWCGROUP */ | 0x04000000u /* NEWUTS */ | \
     0x08000000u /* NEWIPC */ | 0x10000000u /* NEWUSER */ | 0x20000000u /* NEWPID */ |   \
     0x40000000u /* NEWNET */)

#define CV_AF_UNIX 1u
#define CV_AF_INET 2u
#define CV_AF_INET6 10u
#define CV_AF_NETLINK 16u
#define CV_NETLINK_ROUTE 0u

#define CV_PR_SET_DUMPABLE 4u

/* newfstatat/statx flag: stat the fd itself (fstat) when the path is empty. */
#define CV_AT_EMPTY_PATH 0x1000u

/* ioctl requests denied in BPF: terminal input injection and chattr of held files. */
static const uint32_t cv_denied_ioctls[] = {
    0x5412u,     /* TIOCSTI */
    0x541Cu,     /* TIOCLINUX */
    0x40086602u, /* FS_IOC_SETFLAGS */
    0x40046602u, /* FS_IOC32_SETFLAGS */
    0x401c5820u, /* FS_IOC_FSSETXATTR */
};
#define CV_DENIED_IOCTLS (sizeof cv_denied_ioctls / sizeof cv_denied_ioctls[0])

/* personality() values Docker allows: PER_LINUX, PER_LINUX32, UNAME26 variants,
 * ADDR_NO_RANDOMIZE, and the 0xffffffff query. */
static const uint32_t cv_allowed_personas[] = {0x0u, 0x8u, 0x20000u, 0x20008u, 0x40000u,
                                               0xffffffffu};
#define CV_ALLOWED_PERSONAS (sizeof cv_allowed_personas / sizeof cv_allowed_personas[0])

#define CV_X32_BIT 0x40000000u

#endif
