/* Which handler answers which syscall. The filter table decides what is
 * notified at all; anything notified without a handler here fails ENOSYS. */
#include <errno.h>
#include <sys/syscall.h>

#include "handlers.h"
#include "common/sysnr.h"

struct cv_reply cv_dispatch(struct cv_notif *n) {
    switch (n->req->data.nr) {
    case __NR_open:
    case __NR_openat:
    case __NR_creat:
        return cv_h_open(n);
    case __NR_execve:
    case __NR_execveat:
        return cv_h_exec(n);
    case __NR_mkdir: case __NR_mkdirat: case __NR_mknod: case __NR_mknodat:
    case __NR_symlink: case __NR_symlinkat: case __NR_link: case __NR_linkat:
    case __NR_unlink: case __NR_unlinkat: case __NR_rmdir:
    case __NR_rename: case __NR_renameat: case __NR_renameat2:
        return cv_h_mutate(n);
    case __NR_chmod: case __NR_fchmodat: case __NR_fchmodat2: case __NR_chown:
    case __NR_lchown: case __NR_fchownat: case __NR_utime: case __NR_utimes:
    case __NR_futimesat: case __NR_utimensat: case __NR_truncate: case __NR_setxattr:
    case __NR_lsetxattr: case __NR_removexattr: case __NR_lremovexattr: case __NR_fchmod:
    case __NR_fchown: case __NR_fsetxattr: case __NR_fremovexattr:
        return cv_h_meta(n);
    case __NR_stat: case __NR_lstat: case __NR_newfstatat: case __NR_statx: case __NR_access:
    case __NR_faccessat: case __NR_faccessat2: case __NR_readlink: case __NR_readlinkat:
    case __NR_statfs: case __NR_getxattr: case __NR_lgetxattr: case __NR_listxattr:
    case __NR_llistxattr: case __NR_inotify_add_watch:
        return cv_h_stat(n);
    case __NR_getdents: case __NR_getdents64:
        return cv_h_dirent(n);
    case __NR_chdir: case __NR_fchdir: case __NR_getcwd:
        return cv_h_cwd(n);
    case __NR_bind:
    case __NR_connect:
    case __NR_listen:
        return cv_h_sock(n);
    case __NR_uname:
        return cv_h_identity(n);
    case __NR_kill: case __NR_tkill: case __NR_tgkill: case __NR_rt_sigqueueinfo:
    case __NR_rt_tgsigqueueinfo: case __NR_pidfd_send_signal: case __NR_prlimit64:
    case __NR_sched_setparam: case __NR_sched_setscheduler: case __NR_sched_setaffinity:
    case __NR_sched_setattr: case __NR_setpriority: case __NR_ioprio_set:
        return cv_h_signal(n);
    default:
        return cv_err(ENOSYS);
    }
}
