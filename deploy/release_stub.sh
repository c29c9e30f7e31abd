#!/bin/sh
# kubelet-ts @@VERSION@@ for @@PLATFORM@@, a self-extracting executable built by deploy/release.ts.
#
# This script is followed by a gzip-compressed tar archive (from byte $offset on) holding the
# agent's modules and the Deno runtime, from @@RUNTIME@@.
# On each start it checks the tree extracted from that archive against the list and checksums
# below; when the tree is missing, partial or changed, it extracts the archive again (into a
# temporary directory, checked, then renamed into place). Then it execs the runtime with the
# agent's flags: the process is the agent's, so signals reach it and its exit code is the one
# returned.
#
# Environment:
#   KUBELET_TS_EXTRACT_DIR  where trees are extracted, one directory per release
#                           (default /var/lib/kubelet-ts as root, else ~/.cache/kubelet-ts)
# Needs sh, tail, gzip, tar, find, sort and sha256sum (coreutils or busybox).
set -euf
umask 022

id=@@ID@@
offset=@@OFFSET@@
self=$0
uid=$(id -u)

fail() {
	echo "kubelet-ts: error: $*" >&2
	exit 1
}

for program in tail gzip tar find sort sha256sum; do
	command -v "$program" >/dev/null 2>&1 || fail "$program is missing: this executable extracts itself with it"
done

if [ -n "${KUBELET_TS_EXTRACT_DIR:-}" ]; then
	base=$KUBELET_TS_EXTRACT_DIR
elif [ "$uid" = 0 ]; then
	base=/var/lib/kubelet-ts
else
	base=${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/kubelet-ts
fi
dir=$base/$id

# private DIR [L]: DIR is a directory owned by this user that no one else can write; with L a
# symbolic link to one is accepted.
private() {
	if [ "${2:-}" != L ] && [ -L "$1" ]; then return 1; fi
	[ -d "$1" ] || return 1
	# shellcheck disable=SC2046 # the fields of ls's line, on purpose
	set -- $(ls -ldn${2:-} "$1")
	[ "$3" = "$uid" ] || return 1
	case $1 in ?????w* | ????????w*) return 1 ;; esac
}

# verify DIR: prints why DIR is not the archive's tree and fails, or succeeds silently. Runs in
# a subshell: its cd stays there.
verify() (
	private "$1" || {
		echo "it is not a directory owned by uid $uid that only its owner can write"
		exit 1
	}
	cd "$1"
	# The archive's files and directories, nothing more or less (the runtime's cache/ aside),
	found=$(find . -path ./cache -prune -o -print | LC_ALL=C sort)
	[ "$found" = "$(listing)" ] || {
		echo "its files are not the archive's"
		exit 1
	}
	# none of them a link or writable by anyone but their owner, this user,
	odd=$(find . -path ./cache -prune -o \( -type l -o -perm -020 -o -perm -002 -o ! -user "$uid" \) -print)
	[ -z "$odd" ] || {
		echo "$(echo "$odd" | head -n 1) is a link, writable by others, or not owned by uid $uid"
		exit 1
	}
	# and each file with its checksum.
	bad=$(checksums | sha256sum -c 2>&1 | sed -n '/: OK$/!{p;q;}')
	[ -z "$bad" ] || {
		echo "$bad"
		exit 1
	}
)

# The tree's entries, as find prints them, sorted; then its files' checksums.
listing() {
	cat <<'LISTING'
@@LISTING@@
LISTING
}
checksums() {
	cat <<'CHECKSUMS'
@@CHECKSUMS@@
CHECKSUMS
}

extract() {
	tmp=$base/.$id.$$
	trap 'rm -rf "$tmp"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	rm -rf "$tmp"
	mkdir -m 0755 "$tmp"
	tail -c +$((offset + 1)) "$self" | gzip -dc | tar -xf - -C "$tmp" ||
		fail "$self: its archive does not extract: the file is damaged (check it against SHA256SUMS)"
	why=$(verify "$tmp") ||
		fail "$self: its archive is damaged ($why): check the file against SHA256SUMS"
	if [ -e "$dir" ]; then
		# Another start extracted it meanwhile: use that one if it is whole.
		if verify "$dir" >/dev/null; then
			rm -rf "$tmp"
		else
			rm -rf "$dir"
			mv "$tmp" "$dir"
		fi
	else
		mv "$tmp" "$dir"
	fi
	trap - EXIT INT TERM
}

mkdir -p "$base"
private "$base" L || fail "$base must be a directory owned by uid $uid that only its owner can write"
if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
	echo "kubelet-ts: extracting into $dir" >&2
	extract
elif ! why=$(verify "$dir"); then
	echo "kubelet-ts: $dir does not match this executable ($why): extracting it again" >&2
	rm -rf "$dir"
	extract
fi

mkdir -p "$dir/cache"
export DENO_DIR="$dir/cache" DENO_NO_UPDATE_CHECK=1
exec "$dir/deno" @@RUN_FLAGS@@ --config "$dir/app/deno.json" "$dir/app/@@ENTRY@@" "$@"
