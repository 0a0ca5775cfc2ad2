#!/usr/bin/env bash
# Builds tokenscope's container image without pulling a base image, then runs
# `tokenscope selftest` inside it.
#
# - Debian's own packages make the root filesystem: `debootstrap --variant=minbase`
#   of bookworm from deb.debian.org, plus ca-certificates (what the Dockerfile's
#   debian:bookworm-slim holds, built here rather than pulled).
# - The release binary goes in (stripped), with an unprivileged user 10001, as
#   the Dockerfile has it.
# - buildah commits the filesystem as an OCI image (`tokenscope:dev`, and an
#   archive target/image/tokenscope-oci.tar to load elsewhere: `podman load -i`,
#   `skopeo copy oci-archive:… docker://registry/…`).
# - podman runs `tokenscope selftest` in it (or, where a sandbox forbids the
#   OCI runtime's setrlimit, buildah with chroot isolation: the image's own
#   filesystem and user, no OCI runtime).
#
# Needs root (debootstrap) and Debian's debootstrap, buildah and podman
# (installed when missing). Not part of the test command: it downloads a
# Debian base (~30 MB) and takes a few minutes.
#
#   scripts/build-image.sh            # prints the image's size and the selftest
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[build-image] $*" >&2; }

need=()
for tool in debootstrap buildah podman; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} (Debian packages)"
  apt-get install -y --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends "${need[@]}" >&2; }
fi

log "building the release binary"
cargo build --release --locked -p tokenscope >&2
work="$(mktemp -d /tmp/tokenscope-image.XXXXXX)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

log "debootstrap: a minimal bookworm from Debian's packages"
debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" \
  http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# What a slim image leaves out: package lists, caches, documentation.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
install -m 0755 target/release/tokenscope "$rootfs/usr/local/bin/tokenscope"
strip "$rootfs/usr/local/bin/tokenscope"
chroot "$rootfs" useradd --uid 10001 --no-create-home tokenscope

log "buildah: the OCI image"
store=(--storage-driver vfs)
ctr="$(buildah "${store[@]}" from scratch)"
buildah "${store[@]}" copy "$ctr" "$rootfs" / >/dev/null
buildah "${store[@]}" config --user 10001 --entrypoint '["tokenscope"]' --cmd '["--help"]' \
  --label org.opencontainers.image.title=tokenscope \
  --label org.opencontainers.image.source=scripts/build-image.sh "$ctr"
buildah "${store[@]}" commit --rm "$ctr" tokenscope:dev >/dev/null
mkdir -p target/image
rm -f target/image/tokenscope-oci.tar
buildah "${store[@]}" push tokenscope:dev oci-archive:target/image/tokenscope-oci.tar >/dev/null
echo "image tokenscope:dev"
buildah "${store[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' tokenscope:dev
echo "archive target/image/tokenscope-oci.tar $(du -h target/image/tokenscope-oci.tar | cut -f1)"
echo "binary $(du -h "$rootfs/usr/local/bin/tokenscope" | cut -f1), root filesystem $(du -sh "$rootfs" | cut -f1)"

log "podman: tokenscope selftest inside the image"
echo
echo "\$ podman run --rm --network none tokenscope:dev selftest --concurrency 16"
if ! podman "${store[@]}" run --rm --network none tokenscope:dev selftest --concurrency 16 2>"$work/podman.err"; then
  # A sandbox that forbids the OCI runtime's setrlimit (crun: "setrlimit
  # RLIMIT_NOFILE: Operation not permitted") cannot start any container;
  # buildah's chroot isolation runs the image's own filesystem and user
  # without an OCI runtime.
  echo "podman could not start it here: $(tail -1 "$work/podman.err")"
  echo "\$ buildah run --isolation chroot <a container of tokenscope:dev> -- tokenscope selftest --concurrency 16"
  ctr="$(buildah "${store[@]}" from tokenscope:dev)"
  buildah "${store[@]}" run --isolation chroot "$ctr" -- tokenscope selftest --concurrency 16
  buildah "${store[@]}" rm "$ctr" >/dev/null
fi
