#!/bin/sh
# Install the Debian packages idemproxy needs, by profile, and only those
# that are missing. Runs as root (or via sudo) with no terminal:
# DEBIAN_FRONTEND=noninteractive, no prompts.
#
#   scripts/deps.sh [PROFILE...]      install the profiles (default: test)
#   scripts/deps.sh --list PROFILE... print their packages, one a line
#
# Profiles (each includes run):
#   run    build ./idemproxy and run it (`make run`: PostgreSQL, the demo
#          upstream, which needs only python3's standard library, curl
#          for the requests the banner suggests, and xxd, which compiles
#          the operator page's files into the binary)
#   test   `make test` and `make chaos`: the pytest suite and its tools
#          (openssl, curl, pgbouncer, clang for the sanitizer build, node
#          and npm for the SDK tests in tests/sdk and python3-stripe for
#          the Python one, nghttp for the upgrade
#          tests, hypercorn and node as upstreams of the upgrade and
#          spelling tests, python3-dnslib for the DNS server of the
#          store host name tests, chromium and its WebDriver for the
#          operator page's test)
#   bench  `make bench`: wrk, nginx, HAProxy, gnuplot, openssl, curl, the JWT
#          helper's python3-cryptography and h2load (nghttp2-client)
#   fuzz   `make fuzz`: clang with libFuzzer
#   image  `make image` and `make image-test`: mmdebstrap (the root
#          filesystem from the Debian mirror), umoci (the OCI image), podman
#          and runc (the test runs the image with them)
#   ha     `make ha`: Patroni (with python3-etcd, the client library its
#          etcd and etcd3 stores need) and etcd-server for the two-node
#          PostgreSQL cluster, psycopg2 and pytest for the test fixtures
#   citus  `make citus` (scripts/citus.sh build): what compiling Citus from
#          source needs: PostgreSQL 15's server headers and pg_config, the
#          GSSAPI headers they include (libkrb5-dev), lz4 and zstd for its
#          columnar storage, perl for the source fix (the target installs
#          the test profile too, for the tests it runs)
set -eu

RUN="build-essential gcc make pkg-config libevent-dev libnghttp2-dev libpq-dev libssl-dev
libyajl-dev postgresql python3 curl xxd"
TEST="python3-pytest python3-psycopg2 python3-cryptography python3-websocket
python3-yaml python3-hypercorn python3-dnslib curl openssl clang libclang-rt-14-dev pgbouncer
mandoc groff-base nghttp2-client nodejs npm"
# promtool (test_reload.py and test_alerts.py check /metrics and the alert
# rules with it; the package's service is not needed) and systemd-analyze
# (test_install.py verifies the unit with it).
TEST="$TEST prometheus systemd"
# A real headless browser for the operator page (test_ui.py): Debian's
# chromium, its WebDriver and the Python bindings that drive it.
TEST="$TEST chromium chromium-driver python3-selenium"
# The HTTP/2 tests (test_h2.py, test_h2_attacks.py): python3-h2 for
# streams and frames of their own, nghttpd as an h2c upstream with trailers.
TEST="$TEST python3-h2 nghttp2-server"
# The gRPC tests (test_grpc.py): a real gRPC server and client, grpcio.
TEST="$TEST python3-grpcio"
# Stripe's Python SDK (stripe-python), driven by test_sdk.py beside the
# npm SDKs: Debian's package, for /usr/bin/python3.
TEST="$TEST python3-stripe"
BENCH="wrk nginx-light haproxy gnuplot-nox curl openssl python3-cryptography nghttp2-client"
FUZZ="clang libclang-rt-14-dev"
IMAGE="mmdebstrap umoci podman runc"
CITUS="postgresql-server-dev-15 libkrb5-dev liblz4-dev libzstd-dev perl"
HA="patroni python3-etcd etcd-server python3-psycopg2 python3-pytest"

usage() {
	echo "usage: $0 [run|test|bench|fuzz|image|ha|citus ...] | --list PROFILE..." >&2
	exit 2
}

# The packages profile $1 adds to run's.
extra() {
	case "$1" in
	run) echo "" ;;
	test) echo "$TEST" ;;
	bench) echo "$BENCH" ;;
	fuzz) echo "$FUZZ" ;;
	image) echo "$IMAGE" ;;
	ha) echo "$HA" ;;
	citus) echo "$CITUS" ;;
	*) return 1 ;;
	esac
}

# Print the packages of profiles $@, one a line, each once, in order.
packages() {
	for profile in "$@"; do
		# shellcheck disable=SC2046,SC2086  # lists of words
		printf '%s\n' $RUN $(extra "$profile")
	done | awk '!seen[$0]++'
}

list=0
if [ "${1:-}" = --list ]; then
	list=1
	shift
	[ $# -gt 0 ] || usage
fi
case "${1:-}" in -*) usage ;; esac
[ $# -gt 0 ] || set -- test
for profile in "$@"; do
	extra "$profile" >/dev/null || {
		echo "deps: unknown profile: $profile (run, test, bench, fuzz, image, ha or citus)" >&2
		exit 2
	}
done

PACKAGES=$(packages "$@")
if [ "$list" = 1 ]; then
	printf '%s\n' "$PACKAGES"
	exit 0
fi

# A node and npm already on PATH (another build of Node.js, which brings
# its own npm and conflicts with Debian's npm package) count as nodejs and npm.
on_path() {
	case "$1" in
	nodejs) command -v node >/dev/null 2>&1 ;;
	npm) command -v npm >/dev/null 2>&1 ;;
	*) return 1 ;;
	esac
}

missing=""
for p in $PACKAGES; do
	on_path "$p" && continue
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

echo "deps ($*): installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -qq update </dev/null
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -y -qq \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	install --no-install-recommends $missing </dev/null >/dev/null
# Debian's prometheus package starts a Prometheus server; the tests want
# promtool only: do not leave the server running or enabled.
case " $missing " in
*" prometheus "*)
	if [ -d /run/systemd/system ]; then
		$SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	elif [ -x /etc/init.d/prometheus ]; then
		$SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
	fi
	;;
esac
echo "deps: done"
