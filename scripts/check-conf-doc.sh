#!/bin/sh
# Check that every directive in the table of conf/conf.c appears in
# idemproxy.conf.example as a directive line, set or commented out
# ("name ..." or "#name ..."), then check the example with ./idemproxy -t when
# the binary exists. Run from the repository root.
set -eu

table=conf/conf.c
example=idemproxy.conf.example

names=$(sed -n '/conf_directives\[\] = {/,/^};/s/^[[:space:]]*CONF_[A-Z_]*ROW("\([a-z_]*\)",.*/\1/p' \
	"$table")
if [ -z "$names" ]; then
	echo "check-conf-doc: no directives found in $table" >&2
	exit 1
fi

missing=
for name in $names; do
	if ! grep -Eq "^[[:space:]]*#?[[:space:]]*$name([[:space:]]|\$)" "$example"; then
		missing="$missing $name"
	fi
done
if [ -n "$missing" ]; then
	echo "check-conf-doc: not documented in $example:$missing" >&2
	exit 1
fi

if [ -x ./idemproxy ]; then
	./idemproxy -t -c "$example"
fi
echo "check-conf-doc: $(echo $names | wc -w) directives documented"
