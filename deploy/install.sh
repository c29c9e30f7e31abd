#!/bin/sh
# Installs kubelet-ts on a host: the binary at KUBELET_PATH, the systemd unit kubelet.service
# and its drop-in kubelet.service.d/10-kubeadm.conf under SYSTEMD_DIR, all inside HOST_ROOT
# (where the DaemonSet mounts the host's directories). Then, if anything changed, it has the
# host's systemd reload its units, enable kubelet.service and restart it, and (for a DaemonSet,
# whose pods must keep running) sleeps until it is stopped.
#
# The binary is the release file (deno task release) or any other executable the image was
# built from; SHA256SUMS beside it in the image names it, and the installer checks it first.
# A new binary is run once on the host with --version before it takes the old one's place: a
# release file extracts itself then (into /var/lib/kubelet-ts), so the service's first start
# does not, and a binary that does not run there is not installed.
#
# Idempotent: a binary with the same sha256 and mode is left alone; a unit file is written when
# absent, or replaced when it still has the "Managed by the kubelet-ts installer" line and its
# content differs; one without that line was edited on the host and is kept. A second run with
# the same image changes nothing and restarts nothing.
#
# Settings (environment):
#   HOST_ROOT        where the host's file system is mounted              (default /host)
#   KUBELET_PATH     the binary's path on the host, also put in ExecStart (default /usr/local/bin/kubelet)
#   SYSTEMD_DIR      the host's unit directory                            (default /etc/systemd/system)
#   RESTART_KUBELET  true: daemon-reload, enable and restart on a change  (default true)
#   PREPARE_KUBELET  true: run a new binary on the host (--version) first (default true)
#   KEEP_RUNNING     true: sleep after installing, until SIGTERM          (default true)
#   HOST_EXEC        how to run a command on the host                     (default nsenter -t 1 -m -u -i -n -p --)
#   SOURCE_DIR       where kubelet, SHA256SUMS, kubelet.service and 10-kubeadm.conf are
#                    (default: this script's directory)
set -eu

HOST_ROOT=${HOST_ROOT:-/host}
KUBELET_PATH=${KUBELET_PATH:-/usr/local/bin/kubelet}
SYSTEMD_DIR=${SYSTEMD_DIR:-/etc/systemd/system}
RESTART_KUBELET=${RESTART_KUBELET:-true}
PREPARE_KUBELET=${PREPARE_KUBELET:-true}
KEEP_RUNNING=${KEEP_RUNNING:-true}
HOST_EXEC=${HOST_EXEC:-nsenter -t 1 -m -u -i -n -p --}
SOURCE_DIR=${SOURCE_DIR:-$(dirname "$0")}
MARKER="# Managed by the kubelet-ts installer"
# The binary path the unit files in the image name; replaced by KUBELET_PATH.
TEMPLATE_PATH=/usr/local/bin/kubelet

log() { echo "kubelet-ts-installer: $*"; }
fail() {
	echo "kubelet-ts-installer: error: $*" >&2
	exit 1
}

for setting in KUBELET_PATH SYSTEMD_DIR; do
	eval "value=\$$setting"
	case "$value" in
	/*[!a-zA-Z0-9/._-]* | *..*) fail "$setting must be a plain absolute path: current value is '$value'" ;;
	/*) ;;
	*) fail "$setting must be an absolute path: current value is '$value'" ;;
	esac
done
for setting in RESTART_KUBELET PREPARE_KUBELET KEEP_RUNNING; do
	eval "value=\$$setting"
	case "$value" in
	true | false) ;;
	*) fail "$setting must be true or false: current value is '$value'" ;;
	esac
done
for file in kubelet SHA256SUMS kubelet.service 10-kubeadm.conf; do
	[ -f "$SOURCE_DIR/$file" ] || fail "$SOURCE_DIR/$file is missing from the image"
done
# The host's directories must be mounted: creating them here would install into the container.
bin_dir=$(dirname "$KUBELET_PATH")
for dir in "$bin_dir" "$SYSTEMD_DIR"; do
	[ -d "$HOST_ROOT$dir" ] || fail "$HOST_ROOT$dir is not a directory: mount the host's $dir there (HOST_ROOT=$HOST_ROOT)"
done

changed=false
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# put SRC DEST MODE: DEST becomes a copy of SRC with MODE, through a temporary file beside it
# and a rename, so a running kubelet keeps its old binary and no reader sees half a file.
put() {
	mkdir -p "$(dirname "$2")"
	cp "$1" "$2.kubelet-ts-new"
	chmod "$3" "$2.kubelet-ts-new"
	mv -f "$2.kubelet-ts-new" "$2"
	changed=true
}

# The binary, checked against the SHA256SUMS it came with.
want=$(sha256 "$SOURCE_DIR/kubelet")
grep -q "^$want [ *]kubelet\$" "$SOURCE_DIR/SHA256SUMS" ||
	fail "$SOURCE_DIR/kubelet does not match $SOURCE_DIR/SHA256SUMS (its sha256 is $want): the image is damaged"
dest=$HOST_ROOT$KUBELET_PATH
if [ -f "$dest" ] && [ "$(sha256 "$dest")" = "$want" ] && [ "$(stat -c %a "$dest")" = 755 ]; then
	log "$KUBELET_PATH is up to date (sha256 $want)"
else
	mkdir -p "$(dirname "$dest")"
	cp "$SOURCE_DIR/kubelet" "$dest.kubelet-ts-new"
	chmod 0755 "$dest.kubelet-ts-new"
	if [ "$PREPARE_KUBELET" = true ]; then
		# HOST_EXEC is a command line: split on purpose.
		# shellcheck disable=SC2086
		if ! version=$($HOST_EXEC "$KUBELET_PATH.kubelet-ts-new" --version 2>&1); then
			rm -f "$dest.kubelet-ts-new"
			fail "the new binary does not run on the host, so it is not installed: '$KUBELET_PATH.kubelet-ts-new --version' printed: $version"
		fi
		log "the new binary runs on the host: $version"
	fi
	mv -f "$dest.kubelet-ts-new" "$dest"
	changed=true
	log "installed $KUBELET_PATH (sha256 $want)"
fi

# install_unit NAME HOST_PATH: the unit file NAME from the image, its ExecStart pointing at
# KUBELET_PATH, at HOST_PATH.
install_unit() {
	sed "s;$TEMPLATE_PATH;$KUBELET_PATH;g" "$SOURCE_DIR/$1" >"$work/$1"
	dest=$HOST_ROOT$2
	if [ ! -e "$dest" ]; then
		put "$work/$1" "$dest" 0644
		log "installed $2"
	elif ! grep -q "^$MARKER" "$dest"; then
		log "kept $2: it has no '$MARKER' line, so it was edited on the host"
	elif cmp -s "$work/$1" "$dest" && [ "$(stat -c %a "$dest")" = 644 ]; then
		log "$2 is up to date"
	else
		put "$work/$1" "$dest" 0644
		log "updated $2"
	fi
}
install_unit kubelet.service "$SYSTEMD_DIR/kubelet.service"
install_unit 10-kubeadm.conf "$SYSTEMD_DIR/kubelet.service.d/10-kubeadm.conf"

if [ "$changed" = false ]; then
	log "nothing changed"
elif [ "$RESTART_KUBELET" = true ]; then
	log "reloading systemd and restarting kubelet.service on the host"
	# HOST_EXEC is a command line: split on purpose.
	# shellcheck disable=SC2086
	$HOST_EXEC systemctl daemon-reload
	# shellcheck disable=SC2086
	$HOST_EXEC systemctl enable kubelet.service
	# shellcheck disable=SC2086
	$HOST_EXEC systemctl restart kubelet.service
	log "kubelet.service restarted"
else
	log "restart skipped (RESTART_KUBELET=false): run 'systemctl daemon-reload && systemctl restart kubelet' on the host"
fi

if [ "$KEEP_RUNNING" = true ]; then
	# The pod's readiness probe: everything is in place.
	: >/tmp/kubelet-ts-installed
	log "done; sleeping until stopped"
	trap 'exit 0' TERM INT
	while :; do
		sleep 3600 &
		wait $!
	done
fi
