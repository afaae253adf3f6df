#!/bin/sh
# Install the Debian packages idemproxy needs to build, run, test and
# benchmark, and only those that are missing. Runs as root (or via sudo)
# with no terminal: DEBIAN_FRONTEND=noninteractive, no prompts.
set -eu

PACKAGES="build-essential gcc make pkg-config libevent-dev libpq-dev libssl-dev
libyajl-dev postgresql python3-pytest python3-psycopg2 python3-cryptography python3-websocket curl clang libclang-rt-14-dev
wrk nginx-light gnuplot-nox pgbouncer"

missing=""
for p in $PACKAGES; do
	st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
	case "$st" in
	ii*) ;;
	*) missing="$missing $p" ;;
	esac
done

[ -n "$missing" ] || exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || {
		echo "deps: missing packages:$missing (run as root to install them)" >&2
		exit 1
	}
	SUDO="sudo -n"
fi

echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq update </dev/null
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -y -qq \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	install --no-install-recommends $missing </dev/null >/dev/null
echo "deps: done"
