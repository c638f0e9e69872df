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

/* clone flags: CLONE_FILES without CLONE_THREAD would let two processes share one fd table,
 * which the supervisor counts on being a single process's (guest/guest.h, fds_stable). */
#define CV_CLONE_FILES 0x00000400u
#define CV_CLONE_THREAD 0x00010000u

#define CV_PR_SET_DUMPABLE 4u

/* fcntl commands: record locks go to the supervisor (a guest's lock must never reach a host
 * file); leases are refused (a lease stalls every other opener). */
#define CV_F_GETLK 5u
#define CV_F_SETLK 6u
#define CV_F_SETLKW 7u
#define CV_F_SETLEASE 1024u
#define CV_F_OFD_GETLK 36u
#define CV_F_OFD_SETLK 37u
#define CV_F_OFD_SETLKW 38u
#define CV_F_UNLCK 2u

/* newfstatat/statx flag: stat the fd itself (fstat) when the path is empty. */
#define CV_AT_EMPTY_PATH 0x1000u

/* ioctl requests that are safe on any fd a guest can hold, allowed in BPF (inclusive ranges):
 * fd flags, the terminal (the guest's own, and ptys it made: opens of other terminals are
 * refused), read-only queries of files and network interfaces. Any other request goes to the
 * supervisor, which refuses it on host objects. */
struct cv_ioctl_range {
    uint32_t lo, hi;
};
static const struct cv_ioctl_range cv_allowed_ioctls[] = {
    {0x5401u, 0x5411u},         /* TCGETS .. TIOCOUTQ (TIOCSTI 0x5412 is not) */
    {0x5413u, 0x541Bu},         /* TIOCGWINSZ .. FIONREAD (TIOCLINUX 0x541C, TIOCCONS are not) */
    {0x541Eu, 0x5422u},         /* TIOCGSERIAL, TIOCSSERIAL, TIOCPKT, FIONBIO, TIOCNOTTY */
    {0x5424u, 0x5425u},         /* TIOCGETD, TCSBRKP (TIOCSETD 0x5423 is not) */
    {0x5427u, 0x5429u},         /* TIOCSBRK, TIOCCBRK, TIOCGSID */
    {0x5450u, 0x5452u},         /* FIONCLEX, FIOCLEX, FIOASYNC */
    {0x5460u, 0x5460u},         /* FIOQSIZE */
    {0x802C542Au, 0x802C542Au}, /* TCGETS2 */
    {0x402C542Bu, 0x402C542Du}, /* TCSETS2, TCSETSW2, TCSETSF2 */
    {0x40045431u, 0x40045431u}, /* TIOCSPTLCK */
    {0x40045436u, 0x40045436u}, /* TIOCSIG (to a pty's slave side, from its master) */
    {0x80045430u, 0x80045430u}, /* TIOCGPTN */
    {0x80045432u, 0x80045432u}, /* TIOCGDEV */
    {0x80045438u, 0x80045440u}, /* TIOCGPKT, TIOCGPTLCK, TIOCGEXCL (and the reads between) */
    {0x8901u, 0x8907u},         /* FIOSETOWN .. SIOCGSTAMPNS */
    {0x8910u, 0x8910u},         /* SIOCGIFNAME */
    {0x8912u, 0x8913u},         /* SIOCGIFCONF, SIOCGIFFLAGS */
    {0x8915u, 0x8915u},         /* SIOCGIFADDR */
    {0x8917u, 0x8917u},         /* SIOCGIFDSTADDR */
    {0x8919u, 0x8919u},         /* SIOCGIFBRDADDR */
    {0x891Bu, 0x891Bu},         /* SIOCGIFNETMASK */
    {0x891Du, 0x891Du},         /* SIOCGIFMETRIC */
    {0x8921u, 0x8921u},         /* SIOCGIFMTU */
    {0x8927u, 0x8927u},         /* SIOCGIFHWADDR */
    {0x8933u, 0x8933u},         /* SIOCGIFINDEX */
    {0x8942u, 0x8942u},         /* SIOCGIFTXQLEN */
    {0x894Bu, 0x894Bu},         /* SIOCOUTQNSD */
    {0x1u, 0x2u},               /* FIBMAP (needs CAP_SYS_RAWIO), FIGETBSZ */
    {0x80046601u, 0x80046601u}, /* FS_IOC32_GETFLAGS */
    {0x80086601u, 0x80086601u}, /* FS_IOC_GETFLAGS */
    {0x80047601u, 0x80047601u}, /* FS_IOC32_GETVERSION */
    {0x80087601u, 0x80087601u}, /* FS_IOC_GETVERSION */
    {0x801C581Fu, 0x801C581Fu}, /* FS_IOC_FSGETXATTR */
    {0xC020660Bu, 0xC020660Bu}, /* FS_IOC_FIEMAP */
    {0x80111500u, 0x80111500u}, /* FS_IOC_GETFSUUID */
    {0x80811501u, 0x80811501u}, /* FS_IOC_GETFSSYSFSPATH */
    {0x81009431u, 0x81009431u}, /* FS_IOC_GETFSLABEL */
    {0x80045200u, 0x80045200u}, /* RNDGETENTCNT */
};
#define CV_ALLOWED_IOCTLS (sizeof cv_allowed_ioctls / sizeof cv_allowed_ioctls[0])

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
