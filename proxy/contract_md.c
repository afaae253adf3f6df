/* The contract as Markdown (contract_md.h): read from its facts only. */
#include "proxy/contract_md.h"

#include <stdio.h>
#include <stdlib.h>

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

/* The status table: the API's own answer first, then every problem. */
static void md_statuses(FILE *f, const struct contract *c, const struct contract_route *cr)
{
	fputs("\n| Status | Error | When | Headers |\n|---|---|---|---|\n"
	      "| the API's | | a new key, or a retry after the first completed (a replay) | "
	      "`Idempotent-Replayed: true` on replays, `Idempotency-Key-Expires` |\n",
	      f);
	for (int i = 0; i < cr->nrows; i++) {
		const struct contract_row *row = &cr->rows[i];

		fprintf(f, "| %d | ", row->status);
		contract_error_name(f, c, cr, row->kind);
		fputs(" | ", f);
		md_cell(f, row->when);
		fputs(" | ", f);
		md_error_headers(f, row);
		fputs(" |\n", f);
	}
}

static void md_route(FILE *f, const struct contract *c, const struct contract_route *cr)
{
	fputs("\n## ", f);
	contract_code(f, cr->operation);
	fputs("\n\n| | |\n|---|---|\n", f);
	md_paths(f, c, cr);
	for (int i = 0; i < FACT_COUNT; i++)
		if (cr->fact[i][0])
			md_fact_row(f, contract_fact_label(i), cr->fact[i]);
	md_statuses(f, c, cr);
}

static void md_doc(FILE *f, const struct contract *c)
{
	int any = 0;

	fprintf(f, "# Idempotency contract\n\n%s", c->intro);
	for (int i = 0; i < c->nroutes; i++) {
		if (c->routes[i].live) {
			md_route(f, c, &c->routes[i]);
			any = 1;
		}
	}
	if (!any)
		fputs("\nNo route intercepts anything: every request is relayed as it is.\n", f);
}

char *contract_md_render(const struct contract *c, size_t *len)
{
	struct contract_text t;

	if (!contract_text_begin(&t))
		return NULL;
	md_doc(t.f, c);
	return contract_text_end(&t, len);
}
