/* Landlock domain A (the host, read/list/execute, minus hidden paths) and
 * domain B (the guest's scopes). Built by the supervisor, which caches the
 * ruleset fd and hands it to each helper, or by the helper itself. */
#ifndef CV_LANDLOCK_RULES_H
#define CV_LANDLOCK_RULES_H

#include <time.h>

#define CV_LL_MAX_EXPANDED 64

/* The directories whose listing shaped the rules (ancestors of hidden paths),
 * with their mtimes: while none changed, the ruleset is still right. */
struct cv_ll_expanded {
    size_t n;
    int overflow;
    char dir[CV_LL_MAX_EXPANDED][256];
    struct timespec mtime[CV_LL_MAX_EXPANDED];
};

/* Domain A's ruleset: read/list/execute on the visible host minus procfs and the
 * hide list (absolute, symlink-free paths), write on the few devices and on ttys.
 * Lists are NULL-terminated and may be NULL. Returns the ruleset fd or -errno;
 * *what names the failing step. x may be NULL. */
int cv_fs_ruleset_build(int abi, const char *const *ttys, const char *const *hide,
                        struct cv_ll_expanded *x, const char **what);
int cv_ll_expanded_fresh(const struct cv_ll_expanded *x);
/* Domain B for the guest: signals and abstract sockets stay inside. */
int cv_apply_scope_domain(int abi);

#endif
