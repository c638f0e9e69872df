/* What the helper sets up before the guest runs. */
#ifndef CV_HELPER_POLICY_H
#define CV_HELPER_POLICY_H

#include <stddef.h>

/* Landlock domain A: read/list/execute on the visible host, write only on the
 * few devices and the inherited terminal. Returns 0 or -errno; *what says which step. */
int cv_apply_fs_domain(int abi, const char **what);
/* Landlock domain B for the guest: signals and abstract sockets stay inside. */
int cv_apply_scope_domain(int abi);
/* Root guests keep Docker's default capability set minus MKNOD/NET_RAW/SETFCAP/SETPCAP. */
int cv_drop_capabilities(void);

#endif
