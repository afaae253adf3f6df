/*
 * The operator page (GET /ui on the admin listener): its files, compiled
 * into the binary from ui/ by scripts/embed-ui.sh, and the one lookup that
 * turns a request path into a file's bytes and media type.
 *
 * The page holds no data: everything it shows comes from the admin API,
 * called by the page itself with the admin token it keeps in the
 * browser's session storage.
 */
#ifndef IDEMPROXY_UI_H
#define IDEMPROXY_UI_H

#include <stddef.h>

/* The page's own Content-Security-Policy: its files only, never framed. */
#define UI_CSP "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

/* The path of the page; its other files are UI_PATH "/NAME". */
#define UI_PATH "/ui"

struct ui_file {
	const char *name; /* base name in ui/: "index.html", "app.js" */
	const unsigned char *data;
	size_t len;
};

/* The generated table (build/VARIANT/gen/ui_files.c). */
extern const struct ui_file ui_files[];
extern const int ui_file_count;

/*
 * The file path names: UI_PATH and UI_PATH "/" are index.html, UI_PATH
 * "/NAME" is NAME. Returns it, with its media type in *type (a static
 * string), or NULL when there is no such file (another path, or a file
 * whose name has no known type).
 */
const struct ui_file *ui_lookup(const char *path, const char **type);

#endif
