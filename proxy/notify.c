/*
 * sd_notify's datagram protocol by hand: a message of newline-separated
 * VAR=VALUE lines sent on an AF_UNIX datagram socket whose address is in
 * NOTIFY_SOCKET ("/run/systemd/notify", or "@name" for an abstract one).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxy/clock.h"
#include "proxy/notify.h"

#define NOTIFY_MSG_MAX 128

int notify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	size_t len;
	socklen_t salen;
	ssize_t n;
	int fd;

	if (!path || !*path)
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sun.sun_path))
		return -1;
	memcpy(sun.sun_path, path, len);
	/* An abstract name: a leading NUL, and no terminating one counted. */
	if (path[0] == '@')
		sun.sun_path[0] = '\0';
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun, salen);
	close(fd);
	return n == (ssize_t)strlen(state) ? 0 : -1;
}

int notify_reloading(void)
{
	char msg[NOTIFY_MSG_MAX];

	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%lld", (long long)clock_now_us());
	return notify_send(msg);
}
