/*
 * NULL-safe frees of libevent objects: each takes the address of the
 * pointer, frees what it points to when there is something, and leaves the
 * pointer NULL, so cleanup paths need no guard and free nothing twice.
 */
#ifndef IDEMPROXY_EVFREE_H
#define IDEMPROXY_EVFREE_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

static inline void evfree_event(struct event **ev)
{
	if (*ev)
		event_free(*ev);
	*ev = NULL;
}

static inline void evfree_evbuffer(struct evbuffer **buf)
{
	if (*buf)
		evbuffer_free(*buf);
	*buf = NULL;
}

static inline void evfree_bufferevent(struct bufferevent **bev)
{
	if (*bev)
		bufferevent_free(*bev);
	*bev = NULL;
}

static inline void evfree_http(struct evhttp **http)
{
	if (*http)
		evhttp_free(*http);
	*http = NULL;
}

static inline void evfree_listener(struct evconnlistener **l)
{
	if (*l)
		evconnlistener_free(*l);
	*l = NULL;
}

static inline void evfree_base(struct event_base **base)
{
	if (*base)
		event_base_free(*base);
	*base = NULL;
}

#endif
