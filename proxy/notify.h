/*
 * The service manager's readiness protocol (systemd's sd_notify, without
 * libsystemd): with NOTIFY_SOCKET set, one datagram per state change.
 */
#ifndef IDEMPROXY_NOTIFY_H
#define IDEMPROXY_NOTIFY_H

/*
 * Send state ("READY=1", "STOPPING=1", ...) to the socket NOTIFY_SOCKET
 * names: a path, or an abstract name after "@". Nothing when it is unset.
 * Never blocks: a full socket drops the message. Returns 0, or -1 when the
 * message could not be sent (logged by the caller if it cares).
 */
int notify_send(const char *state);

/* RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload wants it. */
int notify_reloading(void);

#endif
