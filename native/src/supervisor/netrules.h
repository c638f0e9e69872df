/* Inet destinations a run allows (cv_run_add_net_rule): an address prefix and a port range. */
#ifndef CV_NETRULES_H
#define CV_NETRULES_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

struct cv_net_rule {
    int family;            /* 4 or 6 (a v4-mapped rule is stored as its IPv4 address) */
    uint8_t addr[16];      /* network byte order; the first 4 bytes for IPv4 */
    int prefix;            /* leading bits that must match */
    uint16_t port_lo, port_hi;
    int divert;            /* a TCP connect here goes to `to` instead (cv_run_add_net_divert) */
    struct sockaddr_storage to;
};

/* 0, or -1 for a bad address, prefix or port range. */
int cv_net_rule_make(struct cv_net_rule *out, const char *addr, int prefix, int port_lo, int port_hi);

/* 0, or -1 for a bad address or port: the divert target of a rule already made. */
int cv_net_rule_divert(struct cv_net_rule *rule, const char *to_addr, int to_port);

/* The rule that decides this destination, or NULL: a divert rule first when `stream` (divert
 * rules decide nothing else), then any other. k: 4 (v4) or 6 (v6), as inet_read gives it; port
 * in host order. Loopback, the unspecified address and link-local ones only by a rule that names
 * them (10.0.0.0/0 is not a rule for 127.0.0.1). */
const struct cv_net_rule *cv_net_rules_find(const struct cv_net_rule *rules, size_t n, int k,
                                            const struct in_addr *v4, const struct in6_addr *v6, uint16_t port,
                                            int stream);

/* Is this an address only a rule naming it may open (loopback, the unspecified address,
 * link-local, the metadata service)? family: 4 or 6, as in a rule. */
int cv_net_addr_named_only(int family, const uint8_t *addr);

/* Does a rule other than a divert one allow this destination? */
int cv_net_rules_allow(const struct cv_net_rule *rules, size_t n, int k, const struct in_addr *v4,
                       const struct in6_addr *v6, uint16_t port);

#endif
