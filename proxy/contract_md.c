/* The contract as Markdown (contract_md.h): read from its facts only. */
#include "proxy/contract_md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/contract_facts.h"
#include "proxy/problem.h"
#include "proxy/respond.h"

/* The advice that comes with row's answer (respond.c's headers), Link aside:
 * the intro tells it once for every error. */
static void md_error_headers(FILE *f, const struct contract_row *row)
{
	const struct respond_ph_def *d;
	int n = 0;

	for (int h = 0; h < RESPOND_PH_COUNT; h++) {
		d = respond_problem_header(h);
		if (!d->advice || d->on == RESPOND_ON_CONTRACT_URL || !(row->headers & (1u << h)))
			continue;
		fputs(n++ ? ", " : "", f);
		if (d->value == RESPOND_VALUE_BOOL)
			fprintf(f, "`%s: %s`", d->name,
				problem_should_retry(row->kind) ? "true" : "false");
		else
			contract_code(f, d->name);
	}
}

/* s in a table cell: a "|" would end the cell. */
static void md_cell(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputs("\\|", f);
		else
			fputc(*s == '\n' ? ' ' : *s, f);
	}
}

/* "| label | text |", text escaped for its cell. */
static void md_fact_row(FILE *f, const char *label, const char *text)
{
	fprintf(f, "| %s | ", label);
	md_cell(f, text);
	fputs(" |\n", f);
}

/* cr's methods and paths, each a code span. */
static void md_paths(FILE *f, const struct contract *c, const struct contract_route *cr)
{
	int rest = 0, n = 0;

	fputs("| Methods and paths | ", f);
	for (int i = 0; i < c->nops; i++) {
		if (c->ops[i].cr != cr)
			continue;
		fputs(n++ ? ", " : "", f);
		md_cell(f, c->ops[i].label);
		rest |= c->ops[i].rest;
	}
	if (rest)
		fputs(" (a final `*` matches zero or more segments)", f);
	fputs(" |\n", f);
}

/*
 * The Markdown states the common rules once: a fact or a status row is
 * shared when more than half of the live routes (of the route's error
 * dialect, for a row) have it in the same words, and a route's section
 * tells only where it differs: its own facts and rows, and the shared rows
 * it does not answer.
 */

/* The shared rows of one dialect, sorted by status. */
struct md_shared_rows {
	const struct contract_route *from[PROBLEM_KIND_COUNT]; /* the route a row is read from */
	const struct contract_row *rows[PROBLEM_KIND_COUNT];
	int n;
};

/* The number of live routes of c, of dialect stripe when stripe >= 0. */
static int md_live(const struct contract *c, int stripe)
{
	int n = 0;

	for (int i = 0; i < c->nroutes; i++)
		n += c->routes[i].live && (stripe < 0 || c->routes[i].stripe == stripe);
	return n;
}

/* The text of fact more than half of the live routes have, or NULL. */
static const char *md_shared_fact(const struct contract *c, enum contract_fact fact)
{
	int live = md_live(c, -1);

	for (int i = 0; i < c->nroutes; i++) {
		const char *t = c->routes[i].fact[fact];
		int same = 0;

		if (!c->routes[i].live || !t[0])
			continue;
		for (int j = 0; j < c->nroutes; j++)
			same += c->routes[j].live && strcmp(c->routes[j].fact[fact], t) == 0;
		if (2 * same > live)
			return t;
	}
	return NULL;
}

/* 1 when the rows a and b are told in the same words. */
static int md_row_same(const struct contract_row *a, const struct contract_row *b)
{
	return a->kind == b->kind && a->status == b->status && a->headers == b->headers &&
	       strcmp(a->when, b->when) == 0;
}

/* 1 when other (of cr's dialect) has row in its status table. */
static int md_row_in(const struct contract_route *cr, const struct contract_row *row,
		     const struct contract_route *other)
{
	if (!other->live || cr->stripe != other->stripe)
		return 0;
	for (int i = 0; i < other->nrows; i++)
		if (md_row_same(&other->rows[i], row))
			return 1;
	return 0;
}

/* The rows more than half of the live routes of dialect stripe have. */
static void md_shared_rows(const struct contract *c, int stripe, struct md_shared_rows *s)
{
	int live = md_live(c, stripe), k;

	s->n = 0;
	for (int i = 0; i < c->nroutes; i++) {
		const struct contract_route *cr = &c->routes[i];

		for (int j = 0; cr->live && cr->stripe == stripe && j < cr->nrows; j++) {
			int have = 0, seen = 0;

			for (k = 0; k < c->nroutes; k++)
				have += md_row_in(cr, &cr->rows[j], &c->routes[k]);
			for (k = 0; k < s->n; k++)
				seen |= md_row_same(s->rows[k], &cr->rows[j]);
			if (2 * have <= live || seen || s->n == PROBLEM_KIND_COUNT)
				continue;
			/* in order of status, then as the routes list them */
			for (k = s->n; k > 0 && s->rows[k - 1]->status > cr->rows[j].status; k--) {
				s->rows[k] = s->rows[k - 1];
				s->from[k] = s->from[k - 1];
			}
			s->rows[k] = &cr->rows[j];
			s->from[k] = cr;
			s->n++;
		}
	}
}

/* 1 when cr answers kind, in whatever words. */
static int md_has_kind(const struct contract_route *cr, enum problem_kind kind)
{
	for (int i = 0; i < cr->nrows; i++)
		if (cr->rows[i].kind == kind)
			return 1;
	return 0;
}

/* 1 when s holds row. */
static int md_row_shared(const struct md_shared_rows *s, const struct contract_row *row)
{
	for (int i = 0; i < s->n; i++)
		if (md_row_same(s->rows[i], row))
			return 1;
	return 0;
}

static void md_status_head(FILE *f)
{
	fputs("\n| Status | Error | When | Headers |\n|---|---|---|---|\n", f);
}

static void md_status_row(FILE *f, const struct contract *c, const struct contract_route *cr,
			  const struct contract_row *row)
{
	fprintf(f, "| %d | ", row->status);
	contract_error_name(f, c, cr, row->kind);
	fputs(" | ", f);
	md_cell(f, row->when);
	fputs(" | ", f);
	md_error_headers(f, row);
	fputs(" |\n", f);
}

/* The shared status table of one dialect, the API's own answer first. */
static void md_shared_statuses(FILE *f, const struct contract *c, const struct md_shared_rows *s)
{
	md_status_head(f);
	fputs("| the API's | | a new key, or a retry after the first completed (a replay) | "
	      "`Idempotent-Replayed: true` on replays, `Idempotency-Key-Expires` |\n",
	      f);
	for (int i = 0; i < s->n; i++)
		md_status_row(f, c, s->from[i], s->rows[i]);
}

/* What the routes share: the facts, and the status table of each dialect. */
static void md_shared(FILE *f, const struct contract *c, const struct md_shared_rows *rows)
{
	const char *t;
	int facts = 0;

	fputs("\n## Every route\n\nWhat the routes below share; a route's own section tells "
	      "only what differs from it.\n",
	      f);
	for (int i = 0; i < FACT_COUNT; i++) {
		if (!(t = md_shared_fact(c, i)))
			continue;
		if (!facts++)
			fputs("\n| | |\n|---|---|\n", f);
		md_fact_row(f, contract_fact_label(i), t);
	}
	if (md_live(c, 0)) {
		fprintf(f, "\nThe statuses a route answers%s:\n",
			c->any_stripe ? " with problem details" : "");
		md_shared_statuses(f, c, &rows[0]);
	}
	if (c->any_stripe) {
		fputs("\nThe statuses a route with `errors stripe` answers:\n", f);
		md_shared_statuses(f, c, &rows[1]);
	}
}

/* A route: its methods and paths, then the facts and statuses that differ from the shared ones. */
static void md_route(FILE *f, const struct contract *c, const struct contract_route *cr,
		     const struct md_shared_rows *rows)
{
	const struct md_shared_rows *s = &rows[cr->stripe ? 1 : 0];
	const char *t;
	int own = 0, lacks = 0;

	fputs("\n## ", f);
	contract_code(f, cr->operation);
	fputs("\n\n| | |\n|---|---|\n", f);
	md_paths(f, c, cr);
	for (int i = 0; i < FACT_COUNT; i++) {
		t = md_shared_fact(c, i);
		if (t && strcmp(t, cr->fact[i]) == 0)
			continue;
		if (cr->fact[i][0])
			md_fact_row(f, contract_fact_label(i), cr->fact[i]);
		else if (t)
			md_fact_row(f, contract_fact_label(i), "none");
	}
	for (int i = 0; i < cr->nrows; i++) {
		if (md_row_shared(s, &cr->rows[i]))
			continue;
		if (!own++) {
			fputs("\nStatuses of its own (each in place of the shared row of its "
			      "error):\n",
			      f);
			md_status_head(f);
		}
		md_status_row(f, c, cr, &cr->rows[i]);
	}
	for (int i = 0; i < s->n; i++) {
		if (md_row_in(s->from[i], s->rows[i], cr) || md_has_kind(cr, s->rows[i]->kind))
			continue;
		fputs(lacks++ ? ", " : "\nNever answered here (of the shared statuses): ", f);
		fprintf(f, "%d ", s->rows[i]->status);
		contract_error_name(f, c, cr, s->rows[i]->kind);
	}
	if (lacks)
		fputs(".\n", f);
}

static void md_doc(FILE *f, const struct contract *c)
{
	struct md_shared_rows rows[2];

	fprintf(f, "# Idempotency contract\n\n%s", c->intro);
	if (!md_live(c, -1)) {
		fputs("\nNo route intercepts anything: every request is relayed as it is.\n", f);
		return;
	}
	md_shared_rows(c, 0, &rows[0]);
	md_shared_rows(c, 1, &rows[1]);
	md_shared(f, c, rows);
	for (int i = 0; i < c->nroutes; i++)
		if (c->routes[i].live)
			md_route(f, c, &c->routes[i], rows);
}

char *contract_md_render(const struct contract *c, size_t *len)
{
	struct contract_text t;

	if (!contract_text_begin(&t))
		return NULL;
	md_doc(t.f, c);
	return contract_text_end(&t, len);
}
