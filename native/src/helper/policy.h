/* What the helper sets up before the guest runs. */
#ifndef CV_HELPER_POLICY_H
#define CV_HELPER_POLICY_H

#include <stddef.h>

/* Root guests keep Docker's default capability set minus MKNOD/NET_RAW/SETFCAP/SETPCAP. */
int cv_drop_capabilities(void);

#endif
