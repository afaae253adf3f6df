/*
 * libFuzzer target for the operator page's lookup (proxy/ui.c): the input
 * is a request path, as the admin listener would be asked it. Besides
 * memory errors it checks that a path names a file only when it is "/ui",
 * "/ui/" or "/ui/" and that file's own name, that the file comes with a
 * media type, and that the answer is the compiled-in file itself.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_ui.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/ui.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *path = malloc(size + 1);
	const char *type = NULL, *name;
	const struct ui_file *f;
	size_t n = strlen(UI_PATH);

	if (!path)
		return 0;
	memcpy(path, data, size);
	path[size] = '\0';
	f = ui_lookup(path, &type);
	if (f) {
		if (!type || f < ui_files || f >= ui_files + ui_file_count)
			abort();
		if (strncmp(path, UI_PATH, n) != 0)
			abort();
		name = path + n;
		if (*name == '/')
			name++;
		if (*name ? strcmp(name, f->name) != 0 : strcmp(f->name, "index.html") != 0)
			abort();
	}
	free(path);
	return 0;
}
