#!/bin/bash
# Build launchers/xpk/Dockerfile with buildah, on a host with no Docker engine and no registry of
# images, then run the image's command once (the built-in tiny model, JAX on the CPU):
#
#   launchers/xpk/build_local.sh [--tag NAME] [--dockerfile FILE] [--no-run]
#
# Needs root and buildah (Debian: apt-get install buildah debootstrap). Unless BASE is given, the
# base image is made here from Debian packages (debootstrap bookworm: python3.11 and a venv with
# pip on PATH, as python:3.11-slim has them), trusting the CA bundle this host trusts. Unless
# TORCH_INDEX_URL is given, torch comes from a local index of the CPU wheel this host's pip finds
# (the version this host's python has installed) and its dependencies; everything else comes from
# the package index the image's pip reaches. Nothing is pushed.
#
# Environment: BASE (an image to build FROM instead), TORCH_INDEX_URL (passed to the build as
# it is), WORK (the Debian tree, the torch index and the run's video; default
# /var/tmp/parallel_wan-image), DEBIAN_MIRROR (for debootstrap), BUILDAH_ISOLATION (default
# chroot: it needs no cgroups and works inside a VM or a container).
set -euo pipefail

tag=localhost/parallel_wan:local
dockerfile=launchers/xpk/Dockerfile
run=1
while (($#)); do
    case "$1" in
        --tag) tag=${2:?--tag needs a value}; shift 2 ;;
        --dockerfile) dockerfile=${2:?--dockerfile needs a value}; shift 2 ;;
        --no-run) run=0; shift ;;
        -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "build_local.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${WORK:-/var/tmp/parallel_wan-image}
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
command -v buildah >/dev/null || { echo "build_local.sh: buildah is not installed (apt-get install buildah)" >&2; exit 1; }
mkdir -p "$work"
cd "$repo"

seconds() { date +%s; }
start=$(seconds)

base=${BASE:-}
if [[ -z $base ]]; then
    base=localhost/parallel_wan-base:python3.11-bookworm
    if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
        command -v debootstrap >/dev/null || { echo "build_local.sh: debootstrap is not installed" >&2; exit 1; }
        rootfs=$work/rootfs
        rm -rf "$rootfs"
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" \
            "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
        chroot "$rootfs" python3 -m venv /opt/python
        cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        ctr=$(buildah from scratch)
        mnt=$(buildah mount "$ctr")
        cp -a "$rootfs/." "$mnt/"
        buildah umount "$ctr"
        buildah config --env PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            --env LANG=C.UTF-8 --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt --cmd python "$ctr"
        buildah commit --rm "$ctr" "$base"
        echo "build_local.sh: base image $base made in $(($(seconds) - start)) s"
    fi
fi

volumes=()
torch_index=${TORCH_INDEX_URL:-}
if [[ -z $torch_index ]]; then
    # A PEP 503 index (one folder per project, an index.html of links) of the wheels pip downloads.
    version=$(python3 -c 'import torch; print(torch.__version__)')
    index=$work/torch-index
    rm -rf "$index" "$work/wheels"
    python3 -m pip download -q --only-binary=:all: --python-version 3.11 --dest "$work/wheels" "torch==$version"
    for wheel in "$work"/wheels/*.whl; do
        file=${wheel##*/}
        name=${file%%-*}
        name=${name,,}
        name=${name//_/-}
        name=${name//./-}
        mkdir -p "$index/$name"
        cp "$wheel" "$index/$name/"
        printf '<a href="%s">%s</a>\n' "$file" "$file" >>"$index/$name/index.html"
    done
    volumes=(--volume "$index:/torch-index:ro")
    torch_index=file:///torch-index
fi

built=$(seconds)
buildah bud --layers --network host "${volumes[@]}" --build-arg BASE="$base" \
    --build-arg TORCH_INDEX_URL="$torch_index" -f "$dockerfile" -t "$tag" .
echo "build_local.sh: built $tag in $(($(seconds) - built)) s; size $(buildah images --format '{{.Size}}' "$tag")"

((run)) || exit 0
# The image's CMD as it is, plus a tiny generation's overrides; libtpu is in the image, no TPU here.
mapfile -t cmd < <(buildah inspect --type image --format '{{range .OCIv1.Config.Cmd}}{{println .}}{{end}}' "$tag")
mkdir -p "$work/out"
ctr=$(buildah from "$tag")
trap 'buildah rm "$ctr" >/dev/null' EXIT
ran=$(seconds)
buildah run --volume "$work/out:/out" "$ctr" -- env JAX_PLATFORMS=cpu "${cmd[@]}" \
    mesh=single steps=2 num_frames=5 height=48 width=48 output_dir=/out/tiny
echo "build_local.sh: ran ${cmd[*]} in $(($(seconds) - ran)) s: $(ls -l "$work/out/tiny/video.mp4")"
