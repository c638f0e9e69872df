#ifndef CV_HELPER_RELAY_H
#define CV_HELPER_RELAY_H
/* This process was started as the exec relay (AT_EXECFN is /dev/fd/K). */
int cv_is_relay(void);
/* Fetch the plan and exec it; returns an exit status only when that fails. */
int cv_relay_main(void);
#endif
