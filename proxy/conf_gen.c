/* Configuration generations and one thread's holds on them. */
#include "proxy/conf_gen.h"

#include <stdlib.h>

#include "conf/conf.h"
#include "proxy/secrets.h"

/* A replaced generation some of this thread's requests still use. */
struct conf_gen_retired {
	LIST_ENTRY(conf_gen_retired) link;
	struct conf_gen *gen;
	int requests;
};

struct conf_gen *conf_gen_new(struct conf *conf, struct secrets *secrets)
{
	struct conf_gen *gen = calloc(1, sizeof(*gen));

	if (!gen)
		return NULL;
	gen->conf = conf;
	gen->secrets = secrets;
	atomic_init(&gen->holders, 1);
	return gen;
}

void conf_gen_acquire(struct conf_gen *gen)
{
	atomic_fetch_add(&gen->holders, 1);
}

void conf_gen_release(struct conf_gen *gen)
{
	if (gen && atomic_fetch_sub(&gen->holders, 1) == 1) {
		conf_free(gen->conf);
		secrets_free(gen->secrets);
		free(gen);
	}
}

void conf_gens_init(struct conf_gens *g, struct conf_gen *gen)
{
	conf_gen_acquire(gen);
	g->gen = gen;
	g->requests = 0;
	LIST_INIT(&g->retired);
}

const struct conf *conf_gens_conf(const struct conf_gens *g)
{
	return g->gen->conf;
}

const struct secrets *conf_gens_secrets(const struct conf_gens *g)
{
	return g->gen->secrets;
}

struct conf_gen *conf_gens_hold(struct conf_gens *g)
{
	g->requests++;
	return g->gen;
}

void conf_gens_drop(struct conf_gens *g, struct conf_gen *gen)
{
	struct conf_gen_retired *r;

	if (gen == g->gen) {
		g->requests--;
		return;
	}
	LIST_FOREACH(r, &g->retired, link) {
		if (r->gen == gen) {
			if (--r->requests == 0) {
				LIST_REMOVE(r, link);
				conf_gen_release(r->gen);
				free(r);
			}
			return;
		}
	}
}

void conf_gens_switch(struct conf_gens *g, struct conf_gen *gen)
{
	struct conf_gen_retired *r;

	if (g->requests == 0) {
		conf_gen_release(g->gen);
	} else if ((r = calloc(1, sizeof(*r)))) {
		r->gen = g->gen;
		r->requests = g->requests;
		LIST_INSERT_HEAD(&g->retired, r, link);
	}
	/* else out of memory: the old configuration is kept until exit. */
	g->gen = gen;
	g->requests = 0;
}

void conf_gens_clear(struct conf_gens *g)
{
	conf_gen_release(g->gen);
	g->gen = NULL;
}
