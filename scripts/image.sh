#!/usr/bin/env bash
# `make image`: the OCI image of idemproxy, built from Debian 12 packages
# fetched from the Debian mirror; no container registry is involved.
#
#   scripts/image.sh            build (unless up to date) and load into podman
#   IMAGE_WITHOUT=PKG ...       leave package PKG out (to see the test fail)
#   IMAGE_MIRROR=URL ...        the Debian mirror (default deb.debian.org)
#
# The root filesystem is the runtime libraries ./idemproxy links against
# and their dependencies, unpacked by mmdebstrap --variant=extract (no
# dpkg, no apt, no shell), pruned of documentation (the copyright files
# stay), locales and gconv modules; then /usr/bin/idemproxy, the
# configuration /etc/idemproxy/idemproxy.conf, a user idemproxy (uid and
# gid 65532) in /etc/passwd and /etc/group, and /var/lib/dpkg/status
# naming the packages, for scanners. umoci commits it as one layer with
# user 65532, entrypoint idemproxy, command -c /etc/idemproxy/idemproxy.conf.
#
# Output, under build/image/ (IMAGE_DIR):
#   idemproxy-VERSION.oci.tar   the OCI archive (a tar of an OCI layout)
#   rootfs/                     the image's files as committed
#   packages.txt                the Debian packages, "name version", one a line
# and, when podman is installed, the image loaded as localhost/idemproxy:VERSION
# (not one built with IMAGE_WITHOUT).
# A build is skipped when the archive is newer than ./idemproxy, VERSION,
# idemproxy.conf.example and this script (and IMAGE_WITHOUT is unset).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

cd "$(dirname "$0")/.."
VERSION=$(cat VERSION)
NAME=idemproxy
TAG=$NAME:$VERSION
SUITE=bookworm
MIRROR=${IMAGE_MIRROR:-http://deb.debian.org/debian}
OUT=${IMAGE_DIR:-build/image}
ARCHIVE=$OUT/$NAME-$VERSION.oci.tar
ROOTFS=$OUT/rootfs
UID_GID=65532
WITHOUT=${IMAGE_WITHOUT:-}
# The libraries ./idemproxy links against (libevent's four, libpq, OpenSSL,
# yajl, nghttp2); apt adds what they depend on (glibc, Kerberos, LDAP, GnuTLS, ...).
PACKAGES="libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7
libevent-openssl-2.1-7 libpq5 libssl3 libyajl2 libnghttp2-14"

die() {
	echo "image: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap --mode=root, file ownership)"
[ -x ./idemproxy ] || die "./idemproxy is not built (make)"
for tool in mmdebstrap umoci; do
	command -v "$tool" >/dev/null || die "$tool is missing (scripts/deps.sh image)"
done

up_to_date() {
	[ -z "$WITHOUT" ] && [ -f "$ARCHIVE" ] && [ -f "$OUT/packages.txt" ] || return 1
	local f
	for f in ./idemproxy VERSION idemproxy.conf.example "$0"; do
		[ "$ARCHIVE" -nt "$f" ] || return 1
	done
}

# podman_load: the archive as localhost/idemproxy:VERSION in podman's store.
podman_load() {
	command -v podman >/dev/null || return 0
	if [ -n "$WITHOUT" ]; then
		echo "image: not loaded into podman (built without $WITHOUT)"
		return 0
	fi
	podman rmi -f "$TAG" >/dev/null 2>&1 || true
	if podman load -q -i "$ARCHIVE" >/dev/null 2>"$OUT/podman.log"; then
		echo "image: loaded into podman as localhost/$TAG"
	else
		echo "image: podman could not load it (see $OUT/podman.log)"
	fi
}

if up_to_date; then
	echo "image: $ARCHIVE is up to date"
	podman image exists "$TAG" 2>/dev/null || podman_load
	exit 0
fi

include=""
for p in $PACKAGES; do
	[ "$p" = "$WITHOUT" ] || include="$include,$p"
done
include=${include#,}

mkdir -p "$OUT"
rm -rf "$ROOTFS" "$OUT/oci" "$OUT/bundle" "$OUT/debs"
mkdir -p "$OUT/debs"
debs=$(cd "$OUT/debs" && pwd)

# The extract variant resolves the dependencies with apt, then only
# unpacks the .debs: no maintainer script runs and nothing is installed.
# The hook keeps each .deb's control data (for the package list) and its
# file list (for IMAGE_WITHOUT).
# shellcheck disable=SC2016  # $1, $d and $n are the hook's, expanded there
hook='for d in "$1"/var/cache/apt/archives/*.deb; do
	n="'"$debs"'/$(basename "$d" .deb)"; dpkg-deb -f "$d" >"$n.control";
	dpkg-deb --fsys-tarfile "$d" | tar -t | sed "s|^\./||" >"$n.files"; done'
echo "image: mmdebstrap $SUITE ($include${WITHOUT:+; without $WITHOUT})"
mmdebstrap --quiet --variant=extract --mode=root --include="$include" --extract-hook="$hook" \
	"$SUITE" "$ROOTFS" "$MIRROR" >"$OUT/mmdebstrap.log" 2>&1 ||
	die "mmdebstrap failed (see $OUT/mmdebstrap.log)"

# When another package depends on $WITHOUT, apt pulled it in all the same:
# take its files out again.
if [ -n "$WITHOUT" ]; then
	for list in "$debs/${WITHOUT}_"*.files; do
		[ -f "$list" ] || continue
		while read -r f; do
			if [ -f "$ROOTFS/$f" ] || [ -L "$ROOTFS/$f" ]; then rm -f "$ROOTFS/$f"; fi
		done <"$list"
		rm -f "$list" "${list%.files}.control"
		echo "image: removed the files of $(basename "$list" .files)"
	done
fi

# Prune: what apt and dpkg left, the devices (the runtime makes /dev),
# documentation but the copyright files, locales, gconv modules (idemproxy
# converts no character set), the memory profiler and audit modules.
r=$ROOTFS
rm -rf "$r"/etc/apt "$r"/etc/dpkg "$r"/var/cache/apt "$r"/var/lib/apt "$r"/var/log/apt \
	"$r"/var/lib/dpkg "$r"/etc/fstab "$r"/etc/hostname "$r"/etc/resolv.conf \
	"$r"/usr/share/man "$r"/usr/share/locale "$r"/usr/share/lintian "$r"/usr/share/info \
	"$r"/usr/lib/x86_64-linux-gnu/gconv "$r"/usr/lib/x86_64-linux-gnu/audit \
	"$r"/lib/x86_64-linux-gnu/libmemusage.so "$r"/lib/x86_64-linux-gnu/libpcprofile.so
find "$r"/dev -mindepth 1 -delete
find "$r"/usr/share/doc -mindepth 2 ! -name copyright ! -type d -delete
find "$r"/usr/share/doc -depth -type d -empty -delete
find "$r" -name '*.pyc' -delete

# idemproxy, its configuration, its user; the package database for scanners.
install -D -m 0755 ./idemproxy "$r"/usr/bin/idemproxy
strip --strip-unneeded "$r"/usr/bin/idemproxy
install -D -m 0644 LICENSE "$r"/usr/share/doc/idemproxy/copyright
install -d -m 0755 "$r"/etc/idemproxy
sed -e 's/^listen[[:space:]].*/listen 0.0.0.0:8080/' idemproxy.conf.example \
	>"$r"/etc/idemproxy/idemproxy.conf
chmod 0644 "$r"/etc/idemproxy/idemproxy.conf
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n%s:x:%d:%d:%s:/nonexistent:/usr/sbin/nologin\n' \
	"$NAME" "$UID_GID" "$UID_GID" "$NAME" >"$r"/etc/passwd
printf 'root:x:0:\n%s:x:%d:\n' "$NAME" "$UID_GID" >"$r"/etc/group
chmod 1777 "$r"/tmp
install -d -m 0755 "$r"/var/lib/dpkg
for ctl in "$debs"/*.control; do
	sed '/^Package:/a Status: install ok installed' "$ctl"
	echo
done >"$r"/var/lib/dpkg/status
for ctl in "$debs"/*.control; do
	printf '%s %s\n' "$(sed -n 's/^Package: //p' "$ctl")" "$(sed -n 's/^Version: //p' "$ctl")"
done | sort >"$OUT/packages.txt"
ldconfig -r "$r" 2>/dev/null || true
if [ -e "$r"/bin/sh ] || [ -e "$r"/usr/bin/sh ]; then
	die "a shell is in the image"
fi

# Commit: an empty image, its bundle's rootfs replaced by ours, repacked.
oci=$OUT/oci
umoci init --layout "$oci"
umoci new --image "$oci:$VERSION"
umoci unpack --image "$oci:$VERSION" "$OUT/bundle" >/dev/null
rm -rf "$OUT/bundle/rootfs"
cp -a "$r" "$OUT/bundle/rootfs"
umoci repack --image "$oci:$VERSION" "$OUT/bundle"
umoci config --image "$oci:$VERSION" --os linux --architecture amd64 \
	--config.user "$UID_GID:$UID_GID" --config.workingdir / \
	--config.entrypoint /usr/bin/idemproxy \
	--config.cmd -c --config.cmd /etc/idemproxy/idemproxy.conf \
	--config.exposedports 8080/tcp --config.exposedports 9901/tcp \
	--config.stopsignal SIGTERM \
	--config.label org.opencontainers.image.title=idemproxy \
	--config.label org.opencontainers.image.version="$VERSION" \
	--clear=config.env --config.env PATH=/usr/bin \
	--history.created_by "scripts/image.sh" >/dev/null
umoci gc --layout "$oci"
rm -rf "$OUT/bundle"
# podman load names an OCI archive after its ref.name annotation.
/usr/bin/python3 - "$oci/index.json" "$TAG" <<'EOF'
import json, sys
path, tag = sys.argv[1], sys.argv[2]
with open(path) as f:
    index = json.load(f)
for m in index["manifests"]:
    m.setdefault("annotations", {})["org.opencontainers.image.ref.name"] = tag
with open(path, "w") as f:
    json.dump(index, f)
EOF
rm -f "$ARCHIVE"
tar -C "$oci" -cf "$ARCHIVE.tmp" oci-layout index.json blobs
mv "$ARCHIVE.tmp" "$ARCHIVE"
rm -rf "$oci"

echo "image: $ARCHIVE ($TAG)"
echo "image: archive $(du -k "$ARCHIVE" | cut -f1) KiB, files $(du -sk "$r" | cut -f1) KiB unpacked," \
	"$(wc -l <"$OUT/packages.txt") Debian packages:"
sed 's/^/  /' "$OUT/packages.txt"
podman_load
