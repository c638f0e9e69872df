/* The inet destinations of cv_run_add_net_rule: a rule's address prefix and port range, in
 * either family, and the addresses it must not match. */
#include <arpa/inet.h>
#include <string.h>

#include "check.h"
#include "supervisor/netrules.h"

static int allows(const struct cv_net_rule *rules, size_t n, const char *addr, int port) {
    struct in_addr v4 = {0};
    struct in6_addr v6 = {0};
    int k = inet_pton(AF_INET, addr, &v4) == 1 ? 4 : inet_pton(AF_INET6, addr, &v6) == 1 ? 6 : 0;
    return k && cv_net_rules_allow(rules, n, k, &v4, &v6, (uint16_t)port);
}

int main(void) {
    struct cv_net_rule r[4];
    check(cv_net_rule_make(&r[0], "10.1.0.0", 16, 443, 443) == 0, "v4 /16");
    check(allows(r, 1, "10.1.200.7", 443), "inside the prefix");
    check(!allows(r, 1, "10.2.0.1", 443), "outside the prefix");
    check(!allows(r, 1, "10.1.0.1", 444), "another port");
    check(!allows(r, 1, "::ffff:10.1.0.1", 443), "a v6 address never matches a v4 rule (the caller maps)");

    check(cv_net_rule_make(&r[1], "127.0.0.1", 32, 8000, 8100) == 0, "v4 /32 with a range");
    check(allows(r, 2, "127.0.0.1", 8000) && allows(r, 2, "127.0.0.1", 8100), "range ends");
    check(!allows(r, 2, "127.0.0.1", 7999) && !allows(r, 2, "127.0.0.1", 8101), "outside the range");
    check(!allows(r, 2, "127.0.0.2", 8050), "another loopback address");

    check(cv_net_rule_make(&r[2], "fd00:ec2::", 33, 0, 65535) == 0, "v6 /33, every port");
    check(allows(r, 3, "fd00:ec2::1", 80) && allows(r, 3, "fd00:ec2:7fff::1", 0), "v6 inside");
    check(!allows(r, 3, "fd00:ec2:8000::1", 80), "v6 bit 33 differs");

    check(cv_net_rule_make(&r[3], "::ffff:169.254.169.254", 128, 80, 80) == 0, "a v4-mapped rule");
    check(r[3].family == 4 && r[3].prefix == 32, "is stored as its IPv4 address");
    check(allows(r, 4, "169.254.169.254", 80) && !allows(r, 4, "169.254.169.253", 80), "and matches it");

    struct cv_net_rule bad;
    check(cv_net_rule_make(&bad, "10.0.0.0", 33, 1, 2) < 0, "v4 prefix > 32");
    check(cv_net_rule_make(&bad, "::1", 129, 1, 2) < 0, "v6 prefix > 128");
    check(cv_net_rule_make(&bad, "10.0.0.1", 32, 9, 8) < 0, "lo > hi");
    check(cv_net_rule_make(&bad, "10.0.0.1", 32, 1, 65536) < 0, "port > 65535");
    check(cv_net_rule_make(&bad, "example.com", 32, 1, 2) < 0, "a name is not an address");
    check(cv_net_rule_make(&bad, "::ffff:1.2.3.4", 64, 1, 2) < 0, "a v4-mapped prefix inside ::ffff:0:0/96");
    check(cv_net_rule_make(&r[0], "0.0.0.0", 0, 0, 65535) == 0 && allows(r, 1, "203.0.113.9", 1),
          "/0 matches everything of its family");
    check(!allows(r, 1, "2001:db8::1", 1), "but not the other family");
    check(!allows(r, 1, "127.0.0.1", 1) && !allows(r, 1, "0.0.0.0", 1) && !allows(r, 1, "169.254.169.254", 80),
          "but loopback, 0.0.0.0 and link-local only when a rule names them");
    check(cv_net_rule_make(&r[1], "::", 0, 0, 65535) == 0 && allows(r, 2, "2001:db8::1", 1), "::/0");
    check(!allows(r, 2, "::1", 1) && !allows(r, 2, "::", 1) && !allows(r, 2, "fe80::1", 1) &&
              !allows(r, 2, "fd00:ec2::254", 80),
          "::/0 does not name ::1, ::, fe80::/10 or fd00:ec2::254");
    check(cv_net_rule_make(&r[2], "127.0.0.0", 8, 0, 65535) == 0 && allows(r, 3, "127.9.9.9", 5), "127/8 names them");
    check(cv_net_rule_make(&r[2], "169.254.0.0", 16, 80, 80) == 0 && allows(r, 3, "169.254.169.254", 80),
          "169.254/16 names the metadata address");
    check(cv_net_rule_make(&r[2], "fe80::", 10, 0, 65535) == 0 && allows(r, 3, "fe80::1", 1), "fe80::/10 names fe80::1");

    /* Divert rules: a TCP connect's first answer, nothing for UDP. */
    struct cv_net_rule d[2];
    check(cv_net_rule_make(&d[0], "192.0.2.0", 24, 0, 65535) == 0, "an allow rule");
    check(cv_net_rule_make(&d[1], "192.0.2.7", 32, 443, 443) == 0 && cv_net_rule_divert(&d[1], "127.0.0.1", 9000) == 0,
          "a divert rule");
    struct in_addr a7;
    struct in6_addr none6 = {0};
    inet_pton(AF_INET, "192.0.2.7", &a7);
    const struct cv_net_rule *f = cv_net_rules_find(d, 2, 4, &a7, &none6, 443, 1);
    check(f == &d[1] && f->to.ss_family == AF_INET && ntohs(((struct sockaddr_in *)&f->to)->sin_port) == 9000,
          "stream: the divert rule wins over an earlier allow rule");
    check(cv_net_rules_find(d, 2, 4, &a7, &none6, 443, 0) == &d[0], "datagram: the allow rule");
    check(cv_net_rules_find(d + 1, 1, 4, &a7, &none6, 443, 0) == NULL, "datagram: a divert rule allows nothing");
    check(cv_net_rules_find(d, 2, 4, &a7, &none6, 80, 1) == &d[0], "another port: not diverted");
    check(cv_net_rule_divert(&d[1], "localhost", 9000) < 0 && cv_net_rule_divert(&d[1], "::1", 0) < 0,
          "a divert target is an address and a port");

    /* What a name looked up while the run goes may never open (grants.c). */
    const char *only_named[] = {"127.0.0.1", "127.255.0.9", "0.0.0.0", "0.1.2.3", "169.254.169.254", "::1", "::",
                                "fe80::1", "febf::1", "fd00:ec2::254"};
    const char *plain[] = {"192.0.2.7", "10.0.0.1", "128.0.0.1", "169.255.0.1", "2001:db8::1", "fec0::1", "fd00:ec2::253"};
    for (size_t i = 0; i < sizeof only_named / sizeof *only_named + sizeof plain / sizeof *plain; i++) {
        int named = i < sizeof only_named / sizeof *only_named;
        const char *text = named ? only_named[i] : plain[i - sizeof only_named / sizeof *only_named];
        struct cv_net_rule g;
        int made = cv_net_rule_make(&g, text, strchr(text, ':') ? 128 : 32, 0, 65535) == 0;
        check(made && cv_net_addr_named_only(g.family, g.addr) == named, "%s: only a rule naming it", text);
    }

    printf("netrules: %lu passed, %lu failed\n", passed, failed);
    return failed != 0;
}
