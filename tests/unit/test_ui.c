/* Unit tests for proxy/ui.c: which path names which file of the operator page. */
#include "proxy/ui.h"
#include "tests/unit/unit.h"

/* The name of the file path names, or NULL. */
static const char *named(const char *path)
{
	const char *type = NULL;
	const struct ui_file *f = ui_lookup(path, &type);

	if (f && !type)
		return "(no type)";
	return f ? f->name : NULL;
}

static const char *type_of(const char *path)
{
	const char *type = NULL;

	return ui_lookup(path, &type) ? type : NULL;
}

int main(void)
{
	CHECK(ui_file_count >= 4);
	CHECK_STR(named("/ui"), "index.html");
	CHECK_STR(named("/ui/"), "index.html");
	CHECK_STR(named("/ui/index.html"), "index.html");
	CHECK_STR(named("/ui/app.js"), "app.js");
	CHECK_STR(type_of("/ui"), "text/html; charset=utf-8");
	CHECK_STR(type_of("/ui/app.js"), "text/javascript; charset=utf-8");
	CHECK_STR(type_of("/ui/app.css"), "text/css; charset=utf-8");
	CHECK_STR(type_of("/ui/favicon.svg"), "image/svg+xml");
	CHECK(named("") == NULL);
	CHECK(named("/") == NULL);
	CHECK(named("/u") == NULL);
	CHECK(named("/uix") == NULL);
	CHECK(named("/uI") == NULL);
	CHECK(named("/ui/nothing.js") == NULL);
	CHECK(named("/ui//app.js") == NULL);
	CHECK(named("/ui/app.js/") == NULL);
	CHECK(named("/ui/../ui/app.js") == NULL);
	CHECK(named("/metrics") == NULL);
	/* Every compiled-in file is served, with a type, and is not empty. */
	for (int i = 0; i < ui_file_count; i++) {
		char path[256];

		snprintf(path, sizeof(path), UI_PATH "/%s", ui_files[i].name);
		CHECK_STR(named(path), ui_files[i].name);
		CHECK(ui_files[i].len > 0);
	}
	UNIT_DONE("ui");
}
