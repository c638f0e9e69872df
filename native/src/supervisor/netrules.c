#include "netrules.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "cvisor.h"

int cv_net_rule_make(struct cv_net_rule *out, const char *addr, int prefix, int port_lo, int port_hi) {
    memset(out, 0, sizeof *out);
    struct in6_addr v6;
    if (inet_pton(AF_INET, addr, out->addr) == 1) out->family = 4;
    else if (inet_pton(AF_INET6, addr, &v6) == 1) {
        if (IN6_IS_ADDR_V4MAPPED(&v6)) {
            if (prefix < 96) return -1;
            memcpy(out->addr, &v6.s6_addr[12], 4);
            out->family = 4;
            prefix -= 96;
        } else {
            memcpy(out->addr, v6.s6_addr, 16);
            out->family = 6;
        }
    } else return -1;
    if (prefix < 0 || prefix > (out->family == 4 ? 32 : 128)) return -1;
    if (port_lo < 0 || port_hi > 65535 || port_lo > port_hi) return -1;
    out->prefix = prefix;
    out->port_lo = (uint16_t)port_lo;
    out->port_hi = (uint16_t)port_hi;
    return 0;
}

/* The first `bits` bits of a and b are equal. */
static int prefix_eq(const uint8_t *a, const uint8_t *b, int bits) {
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)whole)) return 0;
    if (!rest) return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

/* The destinations only a rule that names them allows (its prefix at least theirs): this host
 * (loopback, and the unspecified address, which a connect takes as this host) and the link-local
 * ranges (a cloud's metadata service). 0 for any other address. */
static int named_only(int k, const uint8_t *a) {
    static const uint8_t ec2[16] = {0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54};
    static const uint8_t zero[16];
    if (k == 4) return a[0] == 127 || a[0] == 0 ? 8 : a[0] == 169 && a[1] == 254 ? 16 : 0;
    if (!memcmp(a, zero, 15) && a[15] <= 1) return 128; /* :: and ::1 */
    if (!memcmp(a, ec2, 16)) return 128;
    return a[0] == 0xfe && (a[1] & 0xc0) == 0x80 ? 10 : 0; /* fe80::/10 */
}

int cv_net_addr_named_only(int family, const uint8_t *addr) {
    return named_only(family, addr) != 0;
}

const struct cv_net_rule *cv_net_rules_find(const struct cv_net_rule *rules, size_t n, int k,
                                            const struct in_addr *v4, const struct in6_addr *v6, uint16_t port,
                                            int stream) {
    const uint8_t *a = k == 4 ? (const uint8_t *)&v4->s_addr : v6->s6_addr;
    int least = named_only(k, a);
    const struct cv_net_rule *found = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct cv_net_rule *r = &rules[i];
        if (r->divert && !stream) continue;
        if (r->family == k && r->prefix >= least && port >= r->port_lo && port <= r->port_hi &&
            prefix_eq(r->addr, a, r->prefix)) {
            if (r->divert) return r;
            if (!found) found = r;
        }
    }
    return found;
}

int cv_net_rules_allow(const struct cv_net_rule *rules, size_t n, int k, const struct in_addr *v4,
                       const struct in6_addr *v6, uint16_t port) {
    return cv_net_rules_find(rules, n, k, v4, v6, port, 0) != NULL;
}

int cv_net_rule_divert(struct cv_net_rule *rule, const char *to_addr, int to_port) {
    if (!to_addr || to_port < 1 || to_port > 65535) return -1;
    memset(&rule->to, 0, sizeof rule->to);
    struct sockaddr_in *in = (struct sockaddr_in *)&rule->to;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&rule->to;
    if (inet_pton(AF_INET, to_addr, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)to_port);
    } else if (inet_pton(AF_INET6, to_addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)to_port);
    } else return -1;
    rule->divert = 1;
    return 0;
}

CV_API int cv_resolve_host(const char *name, char *out, size_t len) {
    if (!out || !len) return -1;
    out[0] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int e = name && *name ? getaddrinfo(name, NULL, &hints, &res) : EAI_NONAME;
    if (e) {
        snprintf(out, len, "%s", gai_strerror(e));
        return -1;
    }
    int n = 0;
    size_t used = 0;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        char text[INET6_ADDRSTRLEN];
        const void *a = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                        : ai->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                                    : NULL;
        if (!a || !inet_ntop(ai->ai_family, a, text, sizeof text)) continue;
        size_t tl = strlen(text);
        if (used + tl + 2 > len) break;
        memcpy(out + used, text, tl);
        out[used + tl] = '\n';
        used += tl + 1;
        out[used] = 0;
        n++;
    }
    freeaddrinfo(res);
    return n;
}
