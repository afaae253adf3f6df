/* Unit tests of proxy/evalloc.c: zeroed blocks, reuse by size, the bound, double frees. */
#include "proxy/evalloc.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/unit.h"

#if defined(__SANITIZE_ADDRESS__)
#define CACHED 0 /* nothing is cached under AddressSanitizer */
#else
#define CACHED 1
#endif

#define KEEP_SMALL 64 /* EVALLOC_KEEP_SMALL */
#define KEEP_LARGE 8  /* EVALLOC_KEEP_LARGE */

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* A freed block serves the next request of its size or smaller, zeroed. */
static void test_reuse(void)
{
	unsigned char *a = evalloc_calloc(700), *b;

	CHECK(a && all_zero(a, 700));
	if (!a)
		return;
	/* a miss gets the whole power of two, so the block returns to its stack */
	CHECK(!CACHED || malloc_usable_size(a) >= 1024);
	memset(a, 0xab, 700);
	evalloc_free(a);
	b = evalloc_calloc(600);
	CHECK(b && all_zero(b, 600));
	CHECK(!CACHED || b == a);
	evalloc_free(b);
	/* a larger request is not served from a smaller block's stack */
	b = evalloc_calloc(1500);
	CHECK(b && all_zero(b, 1500));
	CHECK(b != a || !CACHED);
	evalloc_free(b);
	evalloc_free(NULL);
	evalloc_thread_end();
}

/* At most KEEP blocks of one size are kept; the others go back to malloc. */
static void test_bound(size_t size, int keep)
{
	void *block[KEEP_SMALL + 4], *again[KEEP_SMALL + 4];
	int n = keep + 4, reused = 0;

	for (int i = 0; i < n; i++)
		block[i] = evalloc_calloc(size);
	for (int i = 0; i < n; i++) {
		CHECK(block[i] != NULL);
		evalloc_free(block[i]);
	}
	/* the cache hands back the last freed first, and only keep of them */
	for (int i = 0; i < n; i++) {
		again[i] = evalloc_calloc(size);
		for (int j = 0; j < n; j++)
			reused += again[i] == block[j] && i < keep;
	}
	CHECK(reused == (CACHED ? keep : reused));
	/* in reverse order of freeing */
	CHECK(!CACHED || again[0] == block[keep - 1]);
	for (int i = 0; i < n; i++)
		evalloc_free(again[i]);
	evalloc_thread_end();
}

/* Blocks larger than 32 KiB are never kept. */
static void test_large(void)
{
	void *a = evalloc_calloc(64 * 1024), *b;

	CHECK(a != NULL);
	evalloc_free(a);
	b = evalloc_calloc(20 * 1024);
	CHECK(b != NULL);
	CHECK(!CACHED || malloc_usable_size(b) < 64 * 1024);
	evalloc_free(b);
	evalloc_thread_end();
}

/*
 * A block freed twice while it is cached aborts (release builds too), in a
 * child so that this process goes on; under AddressSanitizer, which caches
 * nothing, ASan stops the child instead.
 */
static void test_double_free(size_t size)
{
	pid_t pid = fork();
	int status = 0;

	CHECK(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		void *keep = evalloc_calloc(size), *p = evalloc_calloc(size);

		if (null >= 0)
			dup2(null, STDERR_FILENO); /* the abort's message */
		evalloc_free(p);
		evalloc_free(keep); /* p is not on top of its stack */
		evalloc_free(p);
		_exit(0);
	}
	if (pid < 0)
		return;
	CHECK(waitpid(pid, &status, 0) == pid);
	if (CACHED)
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	else
		CHECK(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
}

int main(void)
{
	test_reuse();
	test_bound(200, KEEP_SMALL);
	test_bound(8192, KEEP_SMALL);
	test_bound(16 * 1024, KEEP_LARGE);
	test_bound(32 * 1024, KEEP_LARGE);
	test_large();
	test_double_free(100);
	test_double_free(16 * 1024);
	UNIT_DONE("evalloc");
}
