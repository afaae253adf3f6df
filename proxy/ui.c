/*
 * The operator page's files: which path names which compiled-in file,
 * and as which media type.
 */
#include "proxy/ui.h"

#include <string.h>

#define UI_INDEX "index.html"

/* Media types by file name ending: the only names a ui/ file may have. */
static const struct {
	const char *suffix;
	const char *type;
} ui_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".svg", "image/svg+xml"},
};

static const char *ui_type(const char *name)
{
	size_t len = strlen(name);

	for (size_t i = 0; i < sizeof(ui_types) / sizeof(ui_types[0]); i++) {
		size_t n = strlen(ui_types[i].suffix);

		if (len > n && strcmp(name + len - n, ui_types[i].suffix) == 0)
			return ui_types[i].type;
	}
	return NULL;
}

const struct ui_file *ui_lookup(const char *path, const char **type)
{
	size_t n = strlen(UI_PATH);
	const char *name;

	if (strncmp(path, UI_PATH, n) != 0 || (path[n] && path[n] != '/'))
		return NULL;
	name = path + n;
	if (*name)
		name++;
	if (!*name)
		name = UI_INDEX;
	for (int i = 0; i < ui_file_count; i++)
		if (strcmp(ui_files[i].name, name) == 0) {
			*type = ui_type(name);
			return *type ? &ui_files[i] : NULL;
		}
	return NULL;
}
