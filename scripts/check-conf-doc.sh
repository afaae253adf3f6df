#!/bin/sh
# Check that every directive in the table of conf/conf.c is documented:
# - in idemproxy.conf.example as a directive line, set or commented out
#   ("name ..." or "#name ...");
# - in docs/man/idemproxy.conf.5 as the tag of an item: a line ".B name ...",
#   ".BI name ..." or ".BR name ..." right after a ".TP" line (a mention of
#   the name in another item's text does not count);
# then check the example with ./idemproxy -t when the binary exists. Run
# from the repository root.
#
# With --names it only prints the directive names of the table, one a line
# (scripts/check-docs.sh reads them there).
set -eu

table=conf/conf.c
example=idemproxy.conf.example
man=docs/man/idemproxy.conf.5

names=$(sed -n '/conf_directives\[\] = {/,/^};/s/^[[:space:]]*CONF_[A-Z_]*ROW("\([a-z_]*\)",.*/\1/p' \
	"$table")
if [ -z "$names" ]; then
	echo "check-conf-doc: no directives found in $table" >&2
	exit 1
fi
if [ "${1:-}" = "--names" ]; then
	# shellcheck disable=SC2086  # one name a line
	printf '%s\n' $names
	exit 0
fi
if [ ! -r "$man" ]; then
	echo "check-conf-doc: cannot read $man" >&2
	exit 1
fi

# The man page's item tags: the first word after .B/.BI/.BR on the line
# after each .TP, without quotes or a trailing font escape.
tags=$(awk 'prev == ".TP" && /^\.B[IR]?[ \t]/ {
		w = $2; gsub(/"/, "", w); sub(/\\.*/, "", w); print w
	}
	{ prev = $0 }' "$man")

missing_example=
missing_man=
for name in $names; do
	if ! grep -Eq "^[[:space:]]*#?[[:space:]]*$name([[:space:]]|\$)" "$example"; then
		missing_example="$missing_example $name"
	fi
	if ! printf '%s\n' "$tags" | grep -qx "$name"; then
		missing_man="$missing_man $name"
	fi
done
if [ -n "$missing_example" ]; then
	echo "check-conf-doc: not documented in $example:$missing_example" >&2
fi
if [ -n "$missing_man" ]; then
	echo "check-conf-doc: no .TP item for these in $man:$missing_man" >&2
fi
if [ -n "$missing_example$missing_man" ]; then
	exit 1
fi

if [ -x ./idemproxy ]; then
	./idemproxy -t -c "$example"
fi
echo "check-conf-doc: $(echo $names | wc -w) directives documented in $example and $man"
