/* Real O_PATH fds for the shim (shim/shim.c <-> handlers/open.c).
 *
 * ADDFD cannot pass an O_PATH file (the kernel's fget skips them), so a notified O_PATH open is
 * answered by a read-only open standing in, and a symlink cannot be opened at all. The shim asks
 * for the real one by adding CV_O_FD_BY_SOCKET to the flags of an O_PATH open (a bit the kernel
 * drops from open's flags): the supervisor opens the object it resolved with O_PATH, sends that
 * fd over a unix datagram socket (SCM_RIGHTS, the one byte CV_OPATH_TAG), and injects the socket,
 * whose number is the answer. The shim receives the fd and moves it into the socket's slot, so
 * the guest gets the number a native open would. An O_PATH fd can do less than the read-only
 * open that stood in for it: fstat, a dirfd, fchdir and /proc/self/fd reopens, all of them
 * notified but fstat. */
#ifndef CV_OPATH_PROTO_H
#define CV_OPATH_PROTO_H

#define CV_O_FD_BY_SOCKET 0x40000000
#define CV_OPATH_TAG 'P'

#endif
