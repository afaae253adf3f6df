/*
 * Strict incremental HTTP/1.x parser (RFC 9112).
 *
 * A head is located by scanning the evbuffer in place (evbuffer_peek +
 * memchr, resuming where the previous call stopped) for the blank line;
 * every LF is checked for its CR on the way, so a bare LF fails early, and
 * its offset is kept, so the lines need not be searched again. The
 * complete head is then copied once into the block that also holds the
 * struct http_msg, its header array and the path/query copies, and parsed
 * there; a message is one malloc plus its body evbuffer. Body bytes move
 * with evbuffer_remove_buffer, which hands over whole chains without
 * copying.
 *
 * Framing is rejected rather than guessed whenever a server could read it
 * differently: CL with TE, TE other than exactly "chunked", repeated CL or
 * TE, TE on HTTP/1.0, any CL that is not plain digits. Repeated
 * Content-Length is rejected in responses too, even with identical values
 * (nginx does the same).
 */
#include "proxy/http.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/evfree.h"
#include "http/path.h"

#define HTTP_MAX_CONTENT_LENGTH (INT64_C(1) << 62) /* also caps a decoded body */
#define HTTP_MAX_CHUNK_DIGITS	15
#define HTTP_MAX_EMPTY_LINES	8  /* CRLFs tolerated before a request-line */
#define HTTP_DATE_MAX 40
#define HTTP_SCAN_VECS		8  /* evbuffer chains looked at per peek */
#define HTTP_VERSION_LEN	8  /* "HTTP/1.x" */
#define HTTP_STATUS_LINE_MIN	12 /* "HTTP/1.x 200" */
#define HTTP_STATUS_MIN		100
#define HTTP_STATUS_MAX		599
#define HTTP_ONES		UINT64_C(0x0101010101010101)
#define HTTP_HIGHS		UINT64_C(0x8080808080808080)

/* Character classes of http_ctype. */
#define HTTP_HEADER_LINE_BUF 512 /* a header line shorter than this is written at once */
#define C_TOKEN	 0x01 /* tchar (RFC 9110 5.6.2) */
#define C_VALUE	 0x02 /* field-value byte: HTAB, SP, VCHAR, obs-text */
#define C_TARGET 0x04 /* request-target byte: VCHAR except '#' */
#define C_HOST	 0x08 /* uri-host and port: reg-name, IP-literal, ':' */
#define C_VT	 (C_VALUE | C_TARGET)
#define C_VTH	 (C_VT | C_HOST)
#define C_TVT	 (C_TOKEN | C_VT)
#define C_ALL	 (C_TVT | C_HOST)

static const unsigned char http_ctype[256] = {
    ['\t'] = C_VALUE,
    [' '] = C_VALUE,
    ['!'] = C_ALL,
    ['"'] = C_VT,
    ['#'] = C_TOKEN | C_VALUE,
    ['$' ... '\''] = C_ALL,
    ['(' ... ')'] = C_VTH,
    ['*' ... '+'] = C_ALL,
    [','] = C_VTH,
    ['-' ... '.'] = C_ALL,
    ['/'] = C_VT,
    ['0' ... '9'] = C_ALL,
    [':' ... ';'] = C_VTH,
    ['<'] = C_VT,
    ['='] = C_VTH,
    ['>' ... '@'] = C_VT,
    ['A' ... 'Z'] = C_ALL,
    ['['] = C_VTH,
    ['\\'] = C_VT,
    [']'] = C_VTH,
    ['^'] = C_TVT,
    ['_'] = C_ALL,
    ['`'] = C_TVT,
    ['a' ... 'z'] = C_ALL,
    ['{'] = C_VT,
    ['|'] = C_TVT,
    ['}'] = C_VT,
    ['~'] = C_ALL,
    [0x80 ... 0xff] = C_VALUE,
};

enum http_state {
	HTTP_ST_HEAD,
	HTTP_ST_BODY_LENGTH,
	HTTP_ST_BODY_CLOSE,
	HTTP_ST_CHUNK_SIZE,
	HTTP_ST_CHUNK_DATA,
	HTTP_ST_CHUNK_CRLF,
	HTTP_ST_TRAILER,
	HTTP_ST_DONE,
	HTTP_ST_ERROR,
};

/*
 * Progress of the search for the blank line that ends a head or trailers.
 * The LF offsets found on the way spare the parser a second search.
 */
struct http_scan {
	size_t scanned;			   /* bytes from the buffer start already looked at */
	size_t line_start;		   /* offset of the line being scanned */
	size_t nlines;			   /* complete non-empty lines */
	unsigned char prev;		   /* byte before offset scanned */
	uint16_t lf[HTTP_MAX_HEADERS + 1]; /* LF offset of each non-empty line */
};

_Static_assert(HTTP_MAX_HEAD + 2 <= UINT16_MAX, "LF offsets must fit struct http_scan.lf");

struct http_parser {
	enum http_kind kind;
	enum http_state state;
	enum http_status error; /* returned again once in HTTP_ST_ERROR */
	size_t max_body;
	unsigned options;	/* enum http_options */
	int no_body;
	int upgrade;		/* a 101 answers this request */
	int started;
	int head_done;
	int head_taken;		/* the caller has the message; its body goes to stream */
	int interim;		/* the message is an interim 1xx response */
	int nheaders;		/* of the head, for the trailer limit */
	struct evbuffer *stream;
	struct evbuffer *trailers; /* HTTP_OPT_TRAILERS: the last message's trailer fields */
	int empty_lines;
	struct http_scan scan;
	size_t head_len;
	int64_t remaining; /* bytes left of the body or of the chunk */
	int64_t body_len;  /* decoded body bytes so far */
	struct http_msg *msg;
};

static void http_scan_reset(struct http_scan *s)
{
	s->scanned = 0;
	s->line_start = 0;
	s->nlines = 0;
	s->prev = 0;
}

/*
 * Look for the blank line that ends a head or a trailer section starting at
 * offset 0 of in, resuming at s->scanned. At most limit bytes and max_lines
 * (at most HTTP_MAX_HEADERS + 1) non-empty lines may precede it. Returns
 * HTTP_DONE with s->scanned set to the section length (blank line
 * included), HTTP_MORE, HTTP_ERR_BAD for an LF without its CR, or
 * HTTP_ERR_HEAD_TOO_LARGE.
 */
static enum http_status http_scan_section(struct http_scan *s, struct evbuffer *in, size_t limit,
					  size_t max_lines)
{
	struct evbuffer_iovec vec[HTTP_SCAN_VECS];
	struct evbuffer_ptr ptr;
	size_t len = evbuffer_get_length(in);
	int i, n;

	if (len > limit)
		len = limit;
	while (s->scanned < len) {
		if (evbuffer_ptr_set(in, &ptr, s->scanned, EVBUFFER_PTR_SET) < 0)
			return HTTP_ERR_BAD;
		n = evbuffer_peek(in, len - s->scanned, &ptr, vec, HTTP_SCAN_VECS);
		if (n > HTTP_SCAN_VECS)
			n = HTTP_SCAN_VECS;
		for (i = 0; i < n && s->scanned < len; i++) {
			const unsigned char *base = vec[i].iov_base;
			size_t vlen = vec[i].iov_len;
			const unsigned char *p = base, *lf;

			if (vlen > len - s->scanned)
				vlen = len - s->scanned;
			if (vlen == 0)
				continue;
			while ((lf = memchr(p, '\n', vlen - (size_t)(p - base))) != NULL) {
				size_t pos = s->scanned + (size_t)(lf - base);
				unsigned char prev = lf > base ? lf[-1] : s->prev;

				if (prev != '\r')
					return HTTP_ERR_BAD;
				if (pos == s->line_start + 1) {
					s->scanned = pos + 1;
					return HTTP_DONE;
				}
				if (s->nlines >= max_lines)
					return HTTP_ERR_HEAD_TOO_LARGE;
				s->lf[s->nlines++] = (uint16_t)pos;
				s->line_start = pos + 1;
				p = lf + 1;
			}
			s->prev = base[vlen - 1];
			s->scanned += vlen;
		}
	}
	return s->scanned >= limit ? HTTP_ERR_HEAD_TOO_LARGE : HTTP_MORE;
}

/*
 * 1 when the len bytes at s are all field-value bytes (HTAB, SP, VCHAR,
 * obs-text). Values are most of a head, so eight bytes are checked at a
 * time for anything below SP or equal to DEL; a word with one (normally an
 * HTAB) sends the rest through the table.
 */
static int http_value_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;
	uint64_t w, d;

	for (; i + sizeof(w) <= len; i += sizeof(w)) {
		memcpy(&w, s + i, sizeof(w));
		d = w ^ (HTTP_ONES * 0x7f);
		if (((w - HTTP_ONES * ' ') & ~w & HTTP_HIGHS) ||
		    ((d - HTTP_ONES) & ~d & HTTP_HIGHS))
			break;
	}
	for (; i < len; i++) {
		if (!(http_ctype[s[i]] & C_VALUE))
			return 0;
	}
	return 1;
}

/*
 * Check one field line of len bytes (CRLF excluded): a token, ':', and a
 * value of field bytes. A leading blank (obs-fold) or a blank before the
 * colon fails. Returns 0 and the name length and the value span without
 * surrounding blanks, or -1.
 */
static int http_parse_field(const char *line, size_t len, size_t *name_len, size_t *value_off,
			    size_t *value_len)
{
	const unsigned char *s = (const unsigned char *)line;
	size_t n = 0, v, end = len;

	while (n < len && (http_ctype[s[n]] & C_TOKEN))
		n++;
	if (n == 0 || n == len || s[n] != ':')
		return -1;
	v = n + 1;
	while (v < end && (s[v] == ' ' || s[v] == '\t'))
		v++;
	while (end > v && (s[end - 1] == ' ' || s[end - 1] == '\t'))
		end--;
	if (!http_value_valid(s + v, end - v))
		return -1;
	*name_len = n;
	*value_off = v;
	*value_len = end - v;
	return 0;
}

/* "HTTP/1.0" or "HTTP/1.1" in exactly len bytes: returns the minor or -1. */
static int http_parse_version(const char *s, size_t len)
{
	if (len != HTTP_VERSION_LEN || memcmp(s, "HTTP/1.", HTTP_VERSION_LEN - 1) != 0)
		return -1;
	if (s[HTTP_VERSION_LEN - 1] != '0' && s[HTTP_VERSION_LEN - 1] != '1')
		return -1;
	return s[HTTP_VERSION_LEN - 1] - '0';
}

/* RFC 9110 methods as idemproxy takes them: upper-case letters, '-' and '_' (nginx's rule). */
static int http_method_ok(const char *m)
{
	for (; *m; m++) {
		if (!((*m >= 'A' && *m <= 'Z') || *m == '-' || *m == '_'))
			return 0;
	}
	return 1;
}

/*
 * The path of an absolute-form target (http://host/path?query, RFC 9112
 * 3.2.2): its offset in target (t bytes), or -1 for anything else that
 * does not start with '/'. An empty path is "/" (the caller supplies it).
 */
static long http_absolute_path(const char *target, size_t t)
{
	size_t i;

	if (t > 7 && strncasecmp(target, "http://", 7) == 0)
		i = 7;
	else if (t > 8 && strncasecmp(target, "https://", 8) == 0)
		i = 8;
	else
		return -1;
	if (target[i] == '/' || target[i] == '?')
		return -1; /* no host */
	while (i < t && target[i] != '/' && target[i] != '?')
		i++;
	return (long)i;
}

/*
 * Parse the request-line (len bytes, NUL-terminated at len) in place into
 * m; the path (normalised, path.h) and the query are copied into area,
 * which has room for len + 2 bytes. Returns HTTP_DONE, HTTP_ERR_BAD,
 * HTTP_ERR_METHOD, HTTP_ERR_CONNECT or HTTP_ERR_TARGET.
 */
static enum http_status http_parse_request_line(struct http_msg *m, char *line, size_t len,
						char *area)
{
	char *target, *q;
	size_t n = 0, t = 0, rest, path_off = 0;
	const char *why;
	long abs;

	while (n < len && (http_ctype[(unsigned char)line[n]] & C_TOKEN))
		n++;
	if (n == 0 || n == len || line[n] != ' ')
		return HTTP_ERR_BAD;
	line[n] = '\0';
	target = line + n + 1;
	rest = len - n - 1;
	while (t < rest && (http_ctype[(unsigned char)target[t]] & C_TARGET))
		t++;
	if (t == 0 || t == rest || target[t] != ' ')
		return HTTP_ERR_BAD;
	target[t] = '\0';
	m->version_minor = http_parse_version(target + t + 1, rest - t - 1);
	if (m->version_minor < 0)
		return HTTP_ERR_BAD;
	if (!http_method_ok(line))
		return HTTP_ERR_METHOD;
	if (strcmp(line, "CONNECT") == 0)
		return HTTP_ERR_CONNECT;
	m->method = line;
	m->target = target;
	q = memchr(target, '?', t);
	m->path_len = q ? (size_t)(q - target) : t;
	m->raw_path_len = m->path_len;
	m->slash_alias = path_slash_alias(target, m->raw_path_len);
	if (strcmp(target, "*") == 0) {
		if (strcmp(line, "OPTIONS") != 0)
			return HTTP_ERR_BAD;
	} else if (target[0] != '/') {
		if ((abs = http_absolute_path(target, t)) < 0)
			return HTTP_ERR_BAD;
		path_off = (size_t)abs;
		m->path_len -= path_off;
	}
	if (m->path_len == 0) {
		area[0] = '/';
		m->path_len = 1;
	} else {
		memcpy(area, target + path_off, m->path_len);
	}
	area[m->path_len] = '\0';
	m->path = area;
	if (area[0] == '/' && path_normalise(area, &m->path_len, &why) < 0)
		return HTTP_ERR_TARGET;
	if (q) {
		m->query_len = t - (size_t)(q - target) - 1;
		m->query = area + m->path_len + 1;
		memcpy(m->query, q + 1, m->query_len);
		m->query[m->query_len] = '\0';
	}
	return HTTP_DONE;
}

/*
 * Parse the status-line (len bytes, NUL-terminated at len) in place into m.
 * The reason phrase may be empty or absent with its SP. Returns 0 or -1.
 */
static int http_parse_status_line(struct http_msg *m, char *line, size_t len)
{
	size_t i;

	if (len < HTTP_STATUS_LINE_MIN || line[HTTP_VERSION_LEN] != ' ')
		return -1;
	m->version_minor = http_parse_version(line, HTTP_VERSION_LEN);
	if (m->version_minor < 0)
		return -1;
	m->status = 0;
	for (i = HTTP_VERSION_LEN + 1; i < HTTP_STATUS_LINE_MIN; i++) {
		if (line[i] < '0' || line[i] > '9')
			return -1;
		m->status = m->status * 10 + (line[i] - '0');
	}
	if (m->status < HTTP_STATUS_MIN || m->status > HTTP_STATUS_MAX)
		return -1;
	if (len == HTTP_STATUS_LINE_MIN) {
		m->reason = line + len;
		return 0;
	}
	if (line[HTTP_STATUS_LINE_MIN] != ' ')
		return -1;
	if (!http_value_valid((const unsigned char *)line + HTTP_STATUS_LINE_MIN + 1,
			      len - HTTP_STATUS_LINE_MIN - 1))
		return -1;
	m->reason = line + HTTP_STATUS_LINE_MIN + 1;
	return 0;
}

/* Content-Length value: 1*DIGIT up to HTTP_MAX_CONTENT_LENGTH, or -1. */
static int64_t http_parse_length(const char *s)
{
	int64_t v = 0;

	if (*s == '\0')
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		if (v > (HTTP_MAX_CONTENT_LENGTH - (*s - '0')) / 10)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

/*
 * The next element of the comma-separated list at *s, blanks trimmed, and
 * its length in *len (0 for an empty one); NULL at the list's end.
 */
static const char *http_list_next(const char **s, size_t *len)
{
	const char *start, *end;

	while (**s == ' ' || **s == '\t' || **s == ',')
		(*s)++;
	if (!**s)
		return NULL;
	start = *s;
	while (**s && **s != ',')
		(*s)++;
	end = *s;
	while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*len = (size_t)(end - start);
	return start;
}

/* 1 when the comma-separated list contains the token of len bytes. */
static int http_list_has(const char *list, const char *token, size_t len)
{
	const char *t;
	size_t n;

	while ((t = http_list_next(&list, &n)))
		if (n == len && strncasecmp(t, token, len) == 0)
			return 1;
	return 0;
}

/* 1 when the comma-separated list has a token other than close, keep-alive and upgrade. */
static int http_list_names_more(const char *list)
{
	const char *t;
	size_t n;

	while ((t = http_list_next(&list, &n)))
		if (n && !(n == 5 && !strncasecmp(t, "close", 5)) &&
		    !(n == 10 && !strncasecmp(t, "keep-alive", 10)) &&
		    !(n == 7 && !strncasecmp(t, "upgrade", 7)))
			return 1;
	return 0;
}

enum http_name http_name_of(const char *name, size_t len)
{
	const struct header_policy *row = header_policy(name, len);

	return row ? row->known : HTTP_N_OTHER;
}

/* A Host value: empty, or uri-host [":" port] characters only. */
static int http_host_valid(const char *s)
{
	for (; *s; s++) {
		if (!(http_ctype[(unsigned char)*s] & C_HOST))
			return 0;
	}
	return 1;
}

/* What the fields that matter for framing said, while a head is parsed. */
struct http_fields {
	int ncl;
	int nte;
	int nhost;
	int conn_close;
	int conn_keep;
};

/*
 * Note one field h of m: sets content_length, chunked, expect_continue,
 * connection_names and counts. Returns 0, or -1 for a field that makes the
 * framing ambiguous.
 */
static int http_note_field(struct http_msg *m, struct http_fields *f, const struct http_header *h)
{
	const char *value = h->value;

	switch (h->known) {
	case HTTP_N_CONTENT_LENGTH:
		m->content_length = http_parse_length(value);
		if (++f->ncl > 1 || m->content_length < 0)
			return -1;
		break;
	case HTTP_N_TRANSFER_ENCODING:
		if (++f->nte > 1 || strcasecmp(value, "chunked") != 0)
			return -1;
		m->chunked = 1;
		break;
	case HTTP_N_HOST:
		if (m->kind == HTTP_REQUEST && (++f->nhost > 1 || !http_host_valid(value)))
			return -1;
		break;
	case HTTP_N_CONNECTION:
		f->conn_close |= http_list_has(value, "close", strlen("close"));
		f->conn_keep |= http_list_has(value, "keep-alive", strlen("keep-alive"));
		m->connection_names |= http_list_names_more(value);
		break;
	case HTTP_N_EXPECT:
		if (m->version_minor == 1 && strcasecmp(value, "100-continue") == 0)
			m->expect_continue = 1;
		break;
	default:
		break;
	}
	return 0;
}

/* After all fields: reject ambiguous framing, set keep_alive. 0 or -1. */
static int http_check_fields(struct http_msg *m, const struct http_fields *f)
{
	if (f->ncl && f->nte)
		return -1;
	if (f->nte && m->version_minor == 0)
		return -1;
	if (m->kind == HTTP_REQUEST && m->version_minor == 1 && f->nhost == 0)
		return -1;
	if (m->version_minor == 1)
		m->keep_alive = !f->conn_close;
	else
		m->keep_alive = f->conn_keep && !f->conn_close;
	return 0;
}

/*
 * Allocate the message for a head of head_len bytes at the start of in
 * (found by the scan), move the head into it and parse it into p->msg,
 * which owns it. Returns HTTP_DONE, or an error: HTTP_ERR_BAD when the
 * head is malformed or memory ran out, HTTP_ERR_METHOD, HTTP_ERR_CONNECT or
 * HTTP_ERR_TARGET for a request line that is well-formed but not acceptable.
 */
static enum http_status http_parse_head(struct http_parser *p, struct evbuffer *in)
{
	const uint16_t *lf = p->scan.lf;
	size_t head_len = p->scan.scanned, nfields, size, i;
	struct http_fields fields = {0};
	struct http_msg *m;
	enum http_status st;
	char *head, *line;

	if (p->scan.nlines == 0)
		return HTTP_ERR_BAD;
	nfields = p->scan.nlines - 1;
	/* the path and query copies need at most the request-line's length */
	size = sizeof(*m) + nfields * sizeof(struct http_header) + head_len + lf[0] + 2;
	m = malloc(size);
	if (!m)
		return HTTP_ERR_BAD;
	memset(m, 0, sizeof(*m));
	p->msg = m;
	m->kind = p->kind;
	m->content_length = -1;
	m->headers = (struct http_header *)(m + 1);
	head = (char *)(m->headers + nfields);
	m->body = evbuffer_new();
	if (!m->body || evbuffer_remove(in, head, head_len) != (int)head_len)
		return HTTP_ERR_BAD;

	head[lf[0] - 1] = '\0';
	if (p->kind == HTTP_REQUEST) {
		st = http_parse_request_line(m, head, lf[0] - 1u, head + head_len);
		if (st != HTTP_DONE)
			return st;
	} else if (http_parse_status_line(m, head, lf[0] - 1u) < 0) {
		return HTTP_ERR_BAD;
	}
	for (i = 0; i < nfields; i++) {
		size_t name_len, value_off, value_len;
		const struct header_policy *row;

		line = head + lf[i] + 1;
		head[lf[i + 1] - 1] = '\0';
		if (http_parse_field(line, lf[i + 1] - lf[i] - 2u, &name_len, &value_off,
				     &value_len) < 0)
			return HTTP_ERR_BAD;
		line[name_len] = '\0';
		line[value_off + value_len] = '\0';
		m->headers[i].name = line;
		m->headers[i].value = line + value_off;
		m->headers[i].name_len = name_len;
		m->headers[i].value_len = value_len;
		row = header_policy(line, name_len);
		m->headers[i].known = row ? row->known : HTTP_N_OTHER;
		m->headers[i].policy = row ? row->flags : 0;
		m->nheaders++;
		if (http_note_field(m, &fields, &m->headers[i]) < 0)
			return HTTP_ERR_BAD;
	}
	p->head_len = head_len;
	p->nheaders = m->nheaders;
	if (http_check_fields(m, &fields) < 0)
		return HTTP_ERR_BAD;
	return HTTP_DONE;
}

/* Where the decoded body goes: the message, or the stream once the head was taken. */
static struct evbuffer *http_body_out(struct http_parser *p)
{
	return p->head_taken ? p->stream : p->msg->body;
}

/* Back to waiting for a head, keeping the no-body setting and started. */
static void http_parser_restart(struct http_parser *p)
{
	http_msg_free(p->msg);
	p->msg = NULL;
	if (p->stream)
		evbuffer_drain(p->stream, evbuffer_get_length(p->stream));
	if (p->trailers)
		evbuffer_drain(p->trailers, evbuffer_get_length(p->trailers));
	p->state = HTTP_ST_HEAD;
	p->head_done = 0;
	p->head_taken = 0;
	p->interim = 0;
	p->empty_lines = 0;
	http_scan_reset(&p->scan);
	p->head_len = 0;
	p->remaining = 0;
	p->body_len = 0;
}

/* Drop the CRLFs a client may send before a request-line (RFC 9112 2.2). */
static enum http_status http_skip_empty_lines(struct http_parser *p, struct evbuffer *in)
{
	unsigned char b[2];
	ev_ssize_t n;

	while (p->scan.scanned == 0) {
		n = evbuffer_copyout(in, b, sizeof(b));
		if (n < 1 || b[0] != '\r')
			break;
		if (n < 2)
			return HTTP_MORE;
		if (b[1] != '\n')
			break;
		if (++p->empty_lines > HTTP_MAX_EMPTY_LINES)
			return HTTP_ERR_BAD;
		evbuffer_drain(in, sizeof(b));
	}
	return HTTP_DONE;
}

/* Choose how the body of the parsed head is framed and check max_body. */
static enum http_status http_frame_body(struct http_parser *p)
{
	struct http_msg *m = p->msg;

	if (m->kind == HTTP_RESPONSE) {
		if (m->status == 101) {
			if (!p->upgrade)
				return HTTP_ERR_BAD;
			p->state = HTTP_ST_DONE;
			return HTTP_DONE;
		}
		if (m->status < 200) {
			if ((p->options & HTTP_OPT_INTERIM) && m->status != 100) {
				p->interim = 1;
				p->state = HTTP_ST_DONE;
				return HTTP_DONE;
			}
			http_parser_restart(p);
			return HTTP_DONE;
		}
		if (p->no_body || m->status == 204 || m->status == 304) {
			p->state = HTTP_ST_DONE;
			return HTTP_DONE;
		}
		if (!m->chunked && m->content_length < 0) {
			m->keep_alive = 0;
			p->state = HTTP_ST_BODY_CLOSE;
			return HTTP_DONE;
		}
	}
	if (m->chunked) {
		p->state = HTTP_ST_CHUNK_SIZE;
		return HTTP_DONE;
	}
	if (m->content_length <= 0) {
		p->state = HTTP_ST_DONE;
		return HTTP_DONE;
	}
	/* With HTTP_OPT_HEAD the caller sets the limit after the head
	 * (http_parser_limit_body), which checks Content-Length then. */
	if (p->max_body && !(p->options & HTTP_OPT_HEAD) &&
	    (uint64_t)m->content_length > p->max_body)
		return HTTP_ERR_BODY_TOO_LARGE;
	p->remaining = m->content_length;
	p->state = HTTP_ST_BODY_LENGTH;
	return HTTP_DONE;
}

/*
 * Wait for a whole head, parse it and pick the body framing. The head stays
 * in in until its blank line has arrived.
 */
static enum http_status http_step_head(struct http_parser *p, struct evbuffer *in)
{
	enum http_status st;

	if (p->kind == HTTP_REQUEST) {
		st = http_skip_empty_lines(p, in);
		if (st != HTTP_DONE)
			return st;
	}
	if (evbuffer_get_length(in) > 0)
		p->started = 1;
	st = http_scan_section(&p->scan, in, HTTP_MAX_HEAD, HTTP_MAX_HEADERS + 1);
	/* No line ended within the limit: the request line is the long one. */
	if (st == HTTP_ERR_HEAD_TOO_LARGE && p->kind == HTTP_REQUEST && p->scan.nlines == 0)
		return HTTP_ERR_TARGET_TOO_LONG;
	if (st != HTTP_DONE)
		return st;
	st = http_parse_head(p, in);
	if (st != HTTP_DONE)
		return st;
	p->head_done = 1;
	st = http_frame_body(p);
	if (st == HTTP_DONE && (p->options & HTTP_OPT_HEAD) && p->state != HTTP_ST_DONE &&
	    p->state != HTTP_ST_HEAD)
		return HTTP_HEAD;
	return st;
}

/* Move up to p->remaining bytes into the body; next is the state after it. */
static enum http_status http_step_data(struct http_parser *p, struct evbuffer *in,
				       enum http_state next)
{
	size_t n = evbuffer_get_length(in);
	int moved;

	if (n == 0)
		return HTTP_MORE;
	if ((uint64_t)n > (uint64_t)p->remaining)
		n = (size_t)p->remaining;
	if (n > INT_MAX)
		n = INT_MAX;
	moved = evbuffer_remove_buffer(in, http_body_out(p), n);
	if (moved <= 0)
		return HTTP_ERR_BAD;
	p->remaining -= moved;
	if (p->remaining == 0)
		p->state = next;
	return HTTP_DONE;
}

/* Read-until-close body: take everything there is, within max_body. */
static enum http_status http_step_close(struct http_parser *p, struct evbuffer *in)
{
	size_t n = evbuffer_get_length(in);

	if (n == 0)
		return HTTP_MORE;
	if (p->max_body && (uint64_t)p->body_len + n > p->max_body)
		return HTTP_ERR_BODY_TOO_LARGE;
	if (evbuffer_add_buffer(http_body_out(p), in) < 0)
		return HTTP_ERR_BAD;
	p->body_len += (int64_t)n;
	return HTTP_MORE;
}

/*
 * chunk-size [ chunk-ext ] CRLF within HTTP_MAX_CHUNK_LINE bytes. The
 * extensions are checked for field bytes and ignored.
 */
static enum http_status http_step_chunk_size(struct http_parser *p, struct evbuffer *in)
{
	size_t len = evbuffer_get_length(in), i = 0, digits;
	const unsigned char *line, *lf;
	int64_t size = 0;

	if (len == 0)
		return HTTP_MORE;
	if (len > HTTP_MAX_CHUNK_LINE)
		len = HTTP_MAX_CHUNK_LINE;
	line = evbuffer_pullup(in, (ev_ssize_t)len);
	if (!line)
		return HTTP_ERR_BAD;
	lf = memchr(line, '\n', len);
	if (!lf)
		return len == HTTP_MAX_CHUNK_LINE ? HTTP_ERR_BAD : HTTP_MORE;
	len = (size_t)(lf - line);
	if (len == 0 || line[len - 1] != '\r')
		return HTTP_ERR_BAD;
	len--;
	for (; i < len; i++) {
		unsigned char c = line[i];
		int d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (c | 0x20) - 'a' + 10;
		else
			break;
		if (i >= HTTP_MAX_CHUNK_DIGITS)
			return HTTP_ERR_BAD;
		size = size * 16 + d;
	}
	digits = i;
	if (digits == 0)
		return HTTP_ERR_BAD;
	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (i < len && line[i] != ';')
		return HTTP_ERR_BAD;
	if (i == len && i != digits)
		return HTTP_ERR_BAD;
	if (!http_value_valid(line + i, len - i))
		return HTTP_ERR_BAD;
	evbuffer_drain(in, len + 2);

	if (size == 0) {
		http_scan_reset(&p->scan);
		p->state = HTTP_ST_TRAILER;
		return HTTP_DONE;
	}
	if (size > HTTP_MAX_CONTENT_LENGTH - p->body_len)
		return HTTP_ERR_BAD;
	if (p->max_body && (uint64_t)(p->body_len + size) > p->max_body)
		return HTTP_ERR_BODY_TOO_LARGE;
	p->body_len += size;
	p->remaining = size;
	p->state = HTTP_ST_CHUNK_DATA;
	return HTTP_DONE;
}

/* The CRLF that must follow chunk data. */
static enum http_status http_step_chunk_crlf(struct http_parser *p, struct evbuffer *in)
{
	unsigned char b[2];
	ev_ssize_t n = evbuffer_copyout(in, b, sizeof(b));

	if (n < 1)
		return HTTP_MORE;
	if (b[0] != '\r')
		return HTTP_ERR_BAD;
	if (n < 2)
		return HTTP_MORE;
	if (b[1] != '\n')
		return HTTP_ERR_BAD;
	evbuffer_drain(in, sizeof(b));
	p->state = HTTP_ST_CHUNK_SIZE;
	return HTTP_DONE;
}

/*
 * Trailer fields after the last chunk: checked like header fields and
 * dropped, or kept with HTTP_OPT_TRAILERS. They count toward HTTP_MAX_HEAD and HTTP_MAX_HEADERS together
 * with the head; the closing blank line is not counted.
 */
static enum http_status http_step_trailer(struct http_parser *p, struct evbuffer *in)
{
	size_t limit = HTTP_MAX_HEAD - p->head_len + 2, len, name_len, off, vlen, i, start = 0;
	const uint16_t *lf = p->scan.lf;
	const char *sec;
	enum http_status st;

	st = http_scan_section(&p->scan, in, limit, (size_t)(HTTP_MAX_HEADERS - p->nheaders));
	if (st != HTTP_DONE)
		return st;
	len = p->scan.scanned;
	sec = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
	if (!sec)
		return HTTP_ERR_BAD;
	if ((p->options & HTTP_OPT_TRAILERS) && !p->trailers && !(p->trailers = evbuffer_new()))
		return HTTP_ERR_BAD;
	for (i = 0; i < p->scan.nlines; i++) {
		if (http_parse_field(sec + start, lf[i] - 1u - start, &name_len, &off, &vlen) < 0)
			return HTTP_ERR_BAD;
		if (p->trailers) {
			evbuffer_add(p->trailers, sec + start, name_len);
			http_add_lit(p->trailers, ": ");
			evbuffer_add(p->trailers, sec + start + off, vlen);
			http_add_lit(p->trailers, "\r\n");
		}
		start = lf[i] + 1u;
	}
	evbuffer_drain(in, len);
	p->state = HTTP_ST_DONE;
	return HTTP_DONE;
}

struct http_parser *http_parser_new(enum http_kind kind, size_t max_body)
{
	struct http_parser *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->kind = kind;
	p->max_body = max_body;
	p->state = HTTP_ST_HEAD;
	return p;
}

void http_parser_free(struct http_parser *p)
{
	if (!p)
		return;
	http_msg_free(p->msg);
	evfree_evbuffer(&p->stream);
	evfree_evbuffer(&p->trailers);
	free(p);
}

void http_parser_set_options(struct http_parser *p, unsigned options)
{
	p->options = options;
}

int http_parser_limit_body(struct http_parser *p, size_t max_body)
{
	p->max_body = max_body;
	if (max_body && p->state == HTTP_ST_BODY_LENGTH && (uint64_t)p->remaining > max_body) {
		p->state = HTTP_ST_ERROR;
		p->error = HTTP_ERR_BODY_TOO_LARGE;
		return -1;
	}
	return 0;
}

struct http_msg *http_parser_take_head(struct http_parser *p)
{
	struct http_msg *m = p->msg;

	if (!p->head_done || !m || p->head_taken || p->state == HTTP_ST_DONE ||
	    p->state == HTTP_ST_ERROR)
		return NULL;
	if (!p->stream)
		p->stream = evbuffer_new();
	if (!p->stream || evbuffer_add_buffer(p->stream, m->body) < 0)
		return NULL;
	p->msg = NULL;
	p->head_taken = 1;
	return m;
}

struct evbuffer *http_parser_body(struct http_parser *p)
{
	return p->head_taken ? p->stream : NULL;
}

void http_parser_expect_upgrade(struct http_parser *p, int upgrade)
{
	p->upgrade = upgrade;
}

/* Applies to the response being parsed; http_parser_take clears it. */
void http_parser_expect_no_body(struct http_parser *p, int no_body)
{
	p->no_body = no_body;
}

/*
 * Each step returns HTTP_DONE when it made progress (the state may be the
 * same), HTTP_MORE when it needs input, or an error, which sticks.
 */
enum http_status http_parser_feed(struct http_parser *p, struct evbuffer *in)
{
	enum http_status st = HTTP_DONE;

	while (st == HTTP_DONE) {
		switch (p->state) {
		case HTTP_ST_HEAD:
			st = http_step_head(p, in);
			if (st == HTTP_HEAD)
				return st;
			break;
		case HTTP_ST_BODY_LENGTH:
			st = http_step_data(p, in, HTTP_ST_DONE);
			break;
		case HTTP_ST_BODY_CLOSE:
			st = http_step_close(p, in);
			break;
		case HTTP_ST_CHUNK_SIZE:
			st = http_step_chunk_size(p, in);
			break;
		case HTTP_ST_CHUNK_DATA:
			st = http_step_data(p, in, HTTP_ST_CHUNK_CRLF);
			break;
		case HTTP_ST_CHUNK_CRLF:
			st = http_step_chunk_crlf(p, in);
			break;
		case HTTP_ST_TRAILER:
			st = http_step_trailer(p, in);
			break;
		case HTTP_ST_DONE:
			return HTTP_DONE;
		case HTTP_ST_ERROR:
			return p->error;
		}
	}
	if (st != HTTP_MORE) {
		p->state = HTTP_ST_ERROR;
		p->error = st;
	}
	return st;
}

enum http_status http_parser_eof(struct http_parser *p)
{
	switch (p->state) {
	case HTTP_ST_DONE:
		return HTTP_DONE;
	case HTTP_ST_BODY_CLOSE:
		p->state = HTTP_ST_DONE;
		return HTTP_DONE;
	case HTTP_ST_HEAD:
		if (!p->started)
			return HTTP_MORE;
		break;
	case HTTP_ST_ERROR:
		return p->error;
	default:
		break;
	}
	p->state = HTTP_ST_ERROR;
	p->error = HTTP_ERR_BAD;
	return HTTP_ERR_BAD;
}

int http_parser_head_complete(const struct http_parser *p)
{
	return p->head_done;
}

/* NULL until the head is complete. */
const struct http_msg *http_parser_msg(const struct http_parser *p)
{
	return p->head_done ? p->msg : NULL;
}

/* Interim 1xx responses count: after one, the final response is awaited. */
int http_parser_started(const struct http_parser *p)
{
	return p->started;
}

/* NULL unless the last feed or eof returned HTTP_DONE. */
struct evbuffer *http_parser_trailers(struct http_parser *p)
{
	return p->trailers && evbuffer_get_length(p->trailers) ? p->trailers : NULL;
}

struct http_msg *http_parser_take(struct http_parser *p)
{
	struct http_msg *m;
	int interim = p->interim;

	if (p->state != HTTP_ST_DONE)
		return NULL;
	m = p->head_taken ? NULL : p->msg;
	if (m)
		p->msg = NULL;
	http_parser_restart(p);
	if (!interim) {
		p->started = 0;
		p->no_body = 0;
		p->upgrade = 0;
	}
	return m;
}

/* Frees m, its strings and its body (set m->body to NULL to keep it). */
void http_msg_free(struct http_msg *m)
{
	if (!m)
		return;
	evfree_evbuffer(&m->body);
	evfree_evbuffer(&m->trailers);
	free(m);
}

const char *http_msg_header(const struct http_msg *m, const char *name)
{
	int i;

	for (i = 0; i < m->nheaders; i++) {
		if (strcasecmp(m->headers[i].name, name) == 0)
			return m->headers[i].value;
	}
	return NULL;
}

int http_msg_header_count(const struct http_msg *m, const char *name)
{
	int i, n = 0;

	for (i = 0; i < m->nheaders; i++) {
		if (strcasecmp(m->headers[i].name, name) == 0)
			n++;
	}
	return n;
}

const char *http_msg_known(const struct http_msg *m, enum http_name known)
{
	for (int i = 0; i < m->nheaders; i++) {
		if (m->headers[i].known == known)
			return m->headers[i].value;
	}
	return NULL;
}

/* 1 when a Connection header of m lists the token of len bytes. */
static int http_connection_lists(const struct http_msg *m, const char *token, size_t len)
{
	for (int h = 0; h < m->nheaders; h++) {
		if (m->headers[h].known == HTTP_N_CONNECTION &&
		    http_list_has(m->headers[h].value, token, len))
			return 1;
	}
	return 0;
}

int http_header_is_hop(const struct http_msg *m, const struct http_header *h)
{
	return (h->policy & HEADER_HOP) ||
	       (m->connection_names && http_connection_lists(m, h->name, strlen(h->name)));
}

/* 1 when a trailer field named name (len bytes) may go on after m's body. */
static int http_trailer_goes_on(const struct http_msg *m, const char *name, size_t len)
{
	const struct header_policy *row = header_policy(name, len);
	unsigned dropped = HEADER_HOP | HEADER_MARKER | HEADER_REBUILT | HEADER_FRESH;

	if (row && ((row->flags & dropped) || row->known == HTTP_N_HOST))
		return 0;
	return !(m->connection_names && http_connection_lists(m, name, len));
}

int http_trailers_keep(const struct http_msg *m, struct evbuffer *fields, struct evbuffer *to)
{
	size_t len, bytes = 0;
	int kept = m->nheaders, left_out = 0;
	char *line;

	while ((line = evbuffer_readln(fields, &len, EVBUFFER_EOL_CRLF_STRICT))) {
		const char *colon = memchr(line, ':', len);

		if (!colon || colon == line ||
		    !http_trailer_goes_on(m, line, (size_t)(colon - line)) ||
		    kept >= HTTP_MAX_HEADERS || bytes + len + 2 > HTTP_MAX_HEAD) {
			left_out++;
		} else {
			evbuffer_add(to, line, len);
			http_add_lit(to, "\r\n");
			bytes += len + 2;
			kept++;
		}
		free(line);
	}
	left_out += evbuffer_get_length(fields) > 0;
	evbuffer_drain(fields, evbuffer_get_length(fields));
	return left_out;
}

void http_lower(char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] >= 'A' && s[i] <= 'Z')
			s[i] = (char)(s[i] - 'A' + 'a');
}

int http_msg_takes_trailers(const struct http_msg *m)
{
	for (int h = 0; h < m->nheaders; h++) {
		if (m->headers[h].known == HTTP_N_TE &&
		    http_list_has(m->headers[h].value, "trailers", sizeof("trailers") - 1))
			return 1;
	}
	return 0;
}

int http_line_next(const char **at, const char *end, struct http_line *line)
{
	const char *nl = *at && *at < end ? memchr(*at, '\n', (size_t)(end - *at)) : NULL;
	const char *colon;

	if (!nl)
		return 0;
	colon = memchr(*at, ':', (size_t)(nl - *at));
	*line = (struct http_line){.start = *at, .len = (size_t)(nl + 1 - *at), .name = *at,
				   .name_len = colon ? (size_t)(colon - *at) : 0};
	if (colon && colon + 2 <= nl - 1) {
		line->value = colon + 2;
		line->value_len = (size_t)(nl - 1 - line->value);
	}
	*at = nl + 1;
	return 1;
}

const char *http_msg_field(struct http_msg *m, const char *name, size_t *len)
{
	size_t n = m->trailers ? evbuffer_get_length(m->trailers) : 0, nlen = strlen(name);
	const char *at = n ? (const char *)evbuffer_pullup(m->trailers, -1) : NULL, *end = at + n;
	struct http_line line;
	const char *v;

	while (http_line_next(&at, end, &line)) {
		if (line.value && line.name_len == nlen && strncasecmp(line.name, name, nlen) == 0) {
			*len = line.value_len;
			return line.value;
		}
	}
	v = http_msg_header(m, name);
	if (v)
		*len = strlen(v);
	return v;
}

int http_msg_wants_upgrade(const struct http_msg *m)
{
	const char *up = http_msg_known(m, HTTP_N_UPGRADE);
	int n = 0;

	for (int h = 0; h < m->nheaders; h++)
		n += m->headers[h].known == HTTP_N_UPGRADE;
	if (m->version_minor == 0 || !up || !*up || n > 1)
		return 0;
	return http_connection_lists(m, "upgrade", sizeof("upgrade") - 1);
}

int http_method_is_safe(const char *m)
{
	return !strcmp(m, "GET") || !strcmp(m, "HEAD") || !strcmp(m, "OPTIONS") ||
	       !strcmp(m, "TRACE");
}

int http_status_bodiless(int status)
{
	return status < 200 || status == 204 || status == 304;
}

const char *http_status_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 422: return "Unprocessable Content";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return status < 400 ? "OK" : "Error";
	}
}

void http_add_str(struct evbuffer *out, const char *s)
{
	evbuffer_add(out, s, strlen(s));
}

/* One formatted date per thread: the last second asked for. */
struct http_date_cache {
	time_t t;
	char text[HTTP_DATE_MAX];
};

/* t as an IMF-fixdate (RFC 9110 5.6.7), in English whatever the locale,
 * formatted only when the second changed since the last call with cache. */
static const char *http_date(struct http_date_cache *cache, time_t t)
{
	static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
	static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
	struct tm tm;

	if (t != cache->t || !cache->text[0]) {
		gmtime_r(&t, &tm);
		snprintf(cache->text, sizeof(cache->text), "%s, %02d %s %04d %02d:%02d:%02d GMT",
			 days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900,
			 tm.tm_hour, tm.tm_min, tm.tm_sec);
		cache->t = t;
	}
	return cache->text;
}

void http_add_date_after(struct evbuffer *out, const char *name, int64_t ms_from_now)
{
	/* Replays of one record in one second, most of them, format nothing. */
	static __thread struct http_date_cache after;
	time_t t = time(NULL) + (time_t)((ms_from_now + 999) / 1000);

	http_add_header(out, name, http_date(&after, t));
}

void http_add_date_now(struct evbuffer *out)
{
	static __thread struct http_date_cache now;

	http_add_header(out, "Date", http_date(&now, time(NULL)));
}

void http_add_lines_except(struct evbuffer *out, const char *lines, size_t len, unsigned flags)
{
	size_t from = 0, at = 0;

	while (at < len) {
		const char *eol = memchr(lines + at, '\n', len - at);
		size_t next = eol ? (size_t)(eol - lines) + 1 : len;
		const char *colon = memchr(lines + at, ':', next - at);

		if (colon && (header_flags(lines + at, (size_t)(colon - (lines + at))) & flags)) {
			evbuffer_add(out, lines + from, at - from);
			from = next;
		}
		at = next;
	}
	evbuffer_add(out, lines + from, len - from);
}

void http_add_length(struct evbuffer *out, const char *name, uint64_t value)
{
	char num[24], *p = num + sizeof(num) - 1;

	*p = '\0';
	do
		*--p = (char)('0' + value % 10);
	while (value /= 10);
	http_add_header(out, name, p);
}

/* "name: value\r\n" for a name of n and a value of v bytes. */
static void http_add_header_n(struct evbuffer *out, const char *name, size_t n, const char *value,
			      size_t v)
{
	char line[HTTP_HEADER_LINE_BUF];

	/* One append for the common short line: each costs far more than a copy. */
	if (n + v + 4 > sizeof(line)) {
		evbuffer_add(out, name, n);
		http_add_lit(out, ": ");
		evbuffer_add(out, value, v);
		http_add_lit(out, "\r\n");
		return;
	}
	memcpy(line, name, n);
	memcpy(line + n, ": ", 2);
	memcpy(line + n + 2, value, v);
	memcpy(line + n + 2 + v, "\r\n", 2);
	evbuffer_add(out, line, n + v + 4);
}

void http_add_header(struct evbuffer *out, const char *name, const char *value)
{
	http_add_header_n(out, name, strlen(name), value, strlen(value));
}

void http_add_field(struct evbuffer *out, const struct http_header *h)
{
	http_add_header_n(out, h->name, h->name_len, h->value, h->value_len);
}

void http_add_status_line(struct evbuffer *out, int status, const char *reason)
{
	char line[sizeof("HTTP/1.1 999 ")] = "HTTP/1.1 ";

	if (status < 100 || status > 999) {
		evbuffer_add_printf(out, "HTTP/1.1 %d ", status);
	} else {
		line[9] = (char)('0' + status / 100);
		line[10] = (char)('0' + status / 10 % 10);
		line[11] = (char)('0' + status % 10);
		line[12] = ' ';
		evbuffer_add(out, line, 13);
	}
	http_add_str(out, reason && *reason ? reason : http_status_reason(status));
	http_add_lit(out, "\r\n");
}
