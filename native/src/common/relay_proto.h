/* The exec relay's request and plan (handlers/exec.c <-> helper/relay.c).
 *
 * An exec the kernel cannot do by the guest's own path (a file in the upper
 * layer, a script whose path runs through it) is redirected to cvisor-helper:
 * the supervisor injects the helper as fd K and rewrites the path to
 * "/dev/fd/K". The helper sees AT_EXECFN = "/dev/fd/K", asks for its plan with
 * readlink(CV_RELAY_MAGIC) (a notified call), and execs what the plan says.
 *
 * The plan, NUL-separated fields:
 *   "p" <path>  | "f" <fd>       exec a host path, or an fd injected into the relay
 *   <argc> <arg>...              the full argv, as read before the path was rewritten
 *   <envc> <env>...              the full environment, likewise */
#ifndef CV_RELAY_PROTO_H
#define CV_RELAY_PROTO_H

#define CV_RELAY_MAGIC "/.cvisor-exec-relay-plan"
#define CV_RELAY_PLAN_MAX (8u << 20) /* argv + envp are at most a quarter of the stack limit */

#endif
