#!/bin/sh
# Check the Markdown documents, README.md and docs/**/*.md:
# - every link to a file of the repository ([text](path), ![alt](path) or a
#   reference "[label]: path") names a file or directory that exists,
#   inside the repository: a path is taken from the linking document's
#   directory, or from the repository root when it starts with "/"; links
#   with a scheme (https:, mailto:) are not followed;
# - every link to a heading (path.md#anchor, or #anchor in the same
#   document) names an ATX heading ("## Title") of that Markdown file by
#   GitHub's anchor for it: the title in lower case, without its code-span
#   backticks, link targets and every character but letters, digits, "-",
#   "_" and blanks, each blank turned into "-", and "-1", "-2", ... added
#   for a repeated title. Titles are compared as ASCII: a title holding
#   other characters cannot be linked to;
# - no document keeps a table of directives: a table whose rows start with
#   three or more directives of conf/conf.c's table (a first cell
#   `name ...`) fails, the one directive reference being
#   docs/man/idemproxy.conf.5 (which scripts/check-conf-doc.sh checks names
#   every directive). A row or two naming a directive is a table about
#   something else.
# - no file of the repository cites a design document the repository does
#   not hold (a "section 7" of some design brief): behaviour is described in its own docs.
# Fenced code blocks and code spans are not read for links or headings.
# Run from the repository root.
set -eu

here=$(dirname "$0")
names=$(sh "$here/check-conf-doc.sh" --names)
docs=$(find README.md docs -name '*.md' -type f 2>/dev/null | LC_ALL=C sort)
if [ -z "$docs" ]; then
	echo "check-docs: no Markdown documents (README.md, docs/)" >&2
	exit 1
fi

# awk prints one line per finding: "error<TAB>message", or
# "path<TAB>FILE:LINE<TAB>PATH" for a linked path whose existence the shell
# checks (awk cannot tell a directory from a missing file), then
# "summary<TAB>LINKS<TAB>ANCHORS".
tab=$(printf '\t')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2086  # one document per word
LC_ALL=C awk -v names="$names" '
BEGIN {
	TABLE_DIRECTIVES_MAX = 3
	n = split(names, list, "\n")
	for (i = 1; i <= n; i++) directive[list[i]] = 1
}

function is_fence(line) { return line ~ /^ ? ? ?(```|~~~)/ }

function strip_code(line) {
	gsub(/``[^`]+``/, "", line)
	gsub(/`[^`]*`/, "", line)
	return line
}

# GitHub anchor of an ATX heading line.
function slug(line,    s) {
	s = line
	sub(/^ ? ? ?#+[ \t]+/, "", s)
	sub(/[ \t]+#+[ \t]*$/, "", s)
	sub(/[ \t]+$/, "", s)
	gsub(/`/, "", s)
	gsub(/\]\([^)]*\)/, "]", s)
	s = tolower(s)
	gsub(/[^a-z0-9 _-]/, "", s)
	gsub(/ /, "-", s)
	return s
}

# Read the headings of a Markdown file once; 0 when it cannot be read.
function load(file,    line, fenced, s, rc) {
	if (file in loaded) return loaded[file]
	fenced = 0
	while ((rc = (getline line < file)) > 0) {
		if (is_fence(line)) { fenced = !fenced; continue }
		if (fenced || line !~ /^ ? ? ?#+[ \t]/) continue
		s = slug(line)
		if ((file, s) in anchor) {
			seen[file, s]++
			s = s "-" seen[file, s]
		}
		anchor[file, s] = 1
	}
	close(file)
	loaded[file] = (rc == 0)
	return loaded[file]
}

# A path relative to the repository root, "." and ".." resolved; "" when
# it leaves the repository.
function normal(path,    n, part, i, k, out) {
	n = split(path, part, "/")
	k = 0
	for (i = 1; i <= n; i++) {
		if (part[i] == "" || part[i] == ".") continue
		if (part[i] == "..") { if (k == 0) return ""; k--; continue }
		kept[++k] = part[i]
	}
	out = ""
	for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") kept[i]
	return out == "" ? "." : out
}

function check(target, where,    hash, path, name, dir, full) {
	sub(/^</, "", target); sub(/>$/, "", target)
	if (target == "" || target ~ /^[A-Za-z][A-Za-z0-9+.-]*:/) return
	hash = index(target, "#")
	path = hash ? substr(target, 1, hash - 1) : target
	name = hash ? substr(target, hash + 1) : ""
	if (path == "") {
		full = FILENAME
	} else if (path ~ /^\//) {
		full = normal(path)
	} else {
		dir = FILENAME
		if (!sub(/\/[^\/]*$/, "", dir)) dir = "."
		full = normal(dir "/" path)
	}
	if (full == "") {
		printf "error\t%s: link to %s leaves the repository\n", where, target
		return
	}
	links++
	printf "path\t%s\t%s\n", where, full
	if (name == "" || full !~ /\.md$/) return
	anchors++
	if (load(full) && !((full, name) in anchor))
		printf "error\t%s: link to %s: %s has no heading #%s\n", where, target, full, name
}

# A table ends at its first line that is not a row.
function table_end() {
	if (rows >= TABLE_DIRECTIVES_MAX)
		printf "error\t%s: a table of %d directives: directives are listed in docs/man/idemproxy.conf.5 only\n", table_at, rows
	rows = 0
	table_at = ""
	split("", listed)
}

function table_row(line,    word) {
	if (table_at == "") table_at = FILENAME ":" FNR
	sub(/^[ \t]*\|[ \t]*/, "", line)
	if (line !~ /^`/) return
	word = substr(line, 2)
	sub(/[^a-z_].*/, "", word)
	if ((word in directive) && !(word in listed)) {
		listed[word] = 1
		rows++
	}
}

FNR == 1 { table_end(); fenced = 0 }
is_fence($0) { fenced = !fenced; next }
fenced { next }
/^ ? ? ?\|/ { table_row($0) }
!/^ ? ? ?\|/ { table_end() }
{
	line = strip_code($0)
	where = FILENAME ":" FNR
	if (match(line, /^ ? ? ?\[[^]]+\]:[ \t]*[^ \t]+/)) {
		target = substr(line, RSTART, RLENGTH)
		sub(/^[^]]*\]:[ \t]*/, "", target)
		check(target, where)
		next
	}
	while (match(line, /\]\([^)]*\)/)) {
		target = substr(line, RSTART + 2, RLENGTH - 3)
		line = substr(line, RSTART + RLENGTH)
		sub(/^[ \t]+/, "", target)
		sub(/[ \t].*/, "", target)
		check(target, where)
	}
}
END { table_end(); printf "summary\t%d\t%d\n", links, anchors }
' $docs >"$out"

errors=0
while IFS="$tab" read -r kind a b; do
	case $kind in
	error)
		echo "check-docs: $a" >&2
		errors=$((errors + 1))
		;;
	path)
		if [ ! -e "$b" ]; then
			echo "check-docs: $a: link to a file that does not exist: $b" >&2
			errors=$((errors + 1))
		fi
		;;
	summary)
		links=$a
		anchors=$b
		;;
	esac
done <"$out"
# The word is spelled in two pieces here so this script does not find itself.
outside="DES""IGN"
if cited=$(git grep -n -w -I "$outside" -- . ':!tests/fuzz/corpus' 2>/dev/null); then
	echo "$cited" | sed "s/^/check-docs: cites a document outside the repository: /" >&2
	errors=$((errors + 1))
fi
if [ "$errors" -gt 0 ]; then
	exit 1
fi
echo "check-docs: $(echo "$docs" | wc -l) documents, $links links to repository files ($anchors to headings), no directive table"
