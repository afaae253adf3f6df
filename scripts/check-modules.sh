#!/bin/sh
# The module graph of idemproxy, from the source's own include lines, and
# the check that it has no circle.
#
# A module is a .c file and the .h of the same name (proxy/store.c and
# proxy/store.h are the module proxy/store). Every `#include "proxy/..."`,
# `#include "conf/..."` or `#include "http/..."` line in a module's files is
# an arrow from it to the module it names. The script prints each module
# with the modules it uses, then the modules by layer (layer 0 uses none;
# every other module sits one above the highest module it uses), and fails,
# naming each circle, when modules include each other in a circle. It also
# fails when one function name is defined in two .c files, static or not,
# and when an arrow crosses the folders downwards-only order
# proxy/ -> conf/ -> http/: conf/ includes nothing of proxy/, and http/
# (the HTTP leaves both share) nothing of proxy/ or conf/.
#
# Usage: sh scripts/check-modules.sh [-q]   (-q: only problems and a summary)
# Run from the repository root.
set -eu

quiet=0
[ "${1:-}" = "-q" ] && quiet=1

files=
for f in proxy/*.c proxy/*.h conf/*.c conf/*.h http/*.c http/*.h; do
	[ -f "$f" ] && files="$files $f"
done
[ -n "$files" ] || { echo "check-modules: no sources under proxy/, conf/ or http/" >&2; exit 1; }

# shellcheck disable=SC2086
awk -v quiet="$quiet" '
function module(path) { sub(/\.[ch]$/, "", path); return path }

# Tarjan: strongly connected components of the include graph.
function visit(v,    i, w) {
	index_of[v] = next_index; low[v] = next_index; next_index++
	stack[++top] = v; on_stack[v] = 1
	for (i = 1; i <= ndeps[v]; i++) {
		w = dep[v, i]
		if (!(w in index_of)) {
			visit(w)
			if (low[w] < low[v]) low[v] = low[w]
		} else if (on_stack[w] && index_of[w] < low[v]) {
			low[v] = index_of[w]
		}
	}
	if (low[v] == index_of[v]) {
		ncomp++
		do {
			w = stack[top--]; on_stack[w] = 0
			comp[w] = ncomp; comp_size[ncomp]++
		} while (w != v)
	}
}

# One circle through v inside its component: follow arrows that stay in it.
function circle(v,    path, seen, u, i, w, found) {
	path = v; u = v; delete seen
	while (1) {
		found = ""
		for (i = 1; i <= ndeps[u]; i++) {
			w = dep[u, i]
			if (comp[w] == comp[v]) { found = w; if (w == v) break }
		}
		path = path " -> " found
		if (found == v || (found in seen)) return path
		seen[found] = 1; u = found
	}
}

# Layer of v: 0 without arrows, else one above the highest module it uses;
# the modules of a circle share one layer, above everything any of them uses.
function layer_of(v,    c, i, k, w, l, best) {
	c = comp[v]
	if (c in comp_layer) return comp_layer[c]
	comp_layer[c] = 0
	best = -1
	for (k = 1; k <= nmods; k++) {
		if (comp[mods[k]] != c) continue
		for (i = 1; i <= ndeps[mods[k]]; i++) {
			w = dep[mods[k], i]
			if (comp[w] == c) continue
			l = layer_of(w)
			if (l > best) best = l
		}
	}
	comp_layer[c] = best + 1
	return comp_layer[c]
}

FNR == 1 { m = module(FILENAME); if (!(m in known)) { known[m] = 1; mods[++nmods] = m } in_c = FILENAME ~ /\.c$/ }

# The folders in their order: a module may include one of its own folder
# or of a folder after it, never one before.
function rank(path) { return path ~ /^proxy\// ? 0 : path ~ /^conf\// ? 1 : 2 }

/^#include "(proxy|conf|http)\/[^"]+\.h"/ {
	d = $2; gsub(/"/, "", d); d = module(d)
	if (rank(d) < rank(m) && !((m, d) in climbs)) {
		climbs[m, d] = 1; climb[++nclimbs] = m " includes " d
	}
	if (d != m && !((m, d) in edge)) {
		edge[m, d] = 1; dep[m, ++ndeps[m]] = d; nedges++
		if (!(d in known)) { known[d] = 1; mods[++nmods] = d }
	}
}

# A function definition: a name and "(" at the start of a line of a .c
# file, its body opening on the next line.
in_c && prev_def != "" && /^\{/ {
	if ((prev_def in defined_in) && defined_in[prev_def] != FILENAME)
		twice[prev_def] = defined_in[prev_def] " and " FILENAME
	else
		defined_in[prev_def] = FILENAME
}
{ prev_def = "" }
in_c && /^[A-Za-z_][A-Za-z_0-9 \t*]*[ \t*]\**[A-Za-z_][A-Za-z_0-9]*\(/ && !/;[ \t]*$/ {
	line = $0; sub(/\(.*/, "", line); n = split(line, w, /[ \t*]+/); prev_def = w[n]
}

END {
	# Sorted module list, so the output does not depend on ls.
	for (i = 1; i <= nmods; i++)
		for (j = i + 1; j <= nmods; j++)
			if (mods[j] < mods[i]) { t = mods[i]; mods[i] = mods[j]; mods[j] = t }
	for (i = 1; i <= nmods; i++) {
		v = mods[i]
		for (a = 1; a <= ndeps[v]; a++)
			for (b = a + 1; b <= ndeps[v]; b++)
				if (dep[v, b] < dep[v, a]) { t = dep[v, a]; dep[v, a] = dep[v, b]; dep[v, b] = t }
	}
	for (i = 1; i <= nmods; i++)
		if (!(mods[i] in index_of)) visit(mods[i])

	if (!quiet) {
		print "modules and the modules they include:"
		for (i = 1; i <= nmods; i++) {
			v = mods[i]; s = ""
			for (a = 1; a <= ndeps[v]; a++) s = s " " dep[v, a]
			printf "  %-22s ->%s\n", v, (s == "" ? " (none)" : s)
		}
		maxl = 0
		for (i = 1; i <= nmods; i++) { l = layer_of(mods[i]); if (l > maxl) maxl = l }
		print "layers, leaves first:"
		for (l = 0; l <= maxl; l++) {
			s = ""
			for (i = 1; i <= nmods; i++) if (layer_of(mods[i]) == l) s = s " " mods[i]
			printf "  %2d:%s\n", l, s
		}
	}

	bad = 0
	for (c = 1; c <= ncomp; c++) {
		if (comp_size[c] < 2) continue
		members = ""
		for (i = 1; i <= nmods; i++) if (comp[mods[i]] == c) { if (first_of[c] == "") first_of[c] = mods[i]; members = members " " mods[i] }
		printf "check-modules: circle of %d modules:%s\n", comp_size[c], members
		printf "check-modules:   for example %s\n", circle(first_of[c])
		bad = 1
	}
	for (i = 1; i <= nclimbs; i++) {
		printf "check-modules: %s (conf/ includes no proxy/ header, http/ none of proxy/ or conf/)\n", climb[i]
		bad = 1
	}
	for (name in twice) {
		printf "check-modules: function %s is defined in %s\n", name, twice[name]
		bad = 1
	}
	printf "check-modules: %d modules, %d include arrows, %s\n", nmods, nedges,
		bad ? "FAILED" : "no circle, no name defined twice, no folder included upwards"
	exit bad
}
' $files
