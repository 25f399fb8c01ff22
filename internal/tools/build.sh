#!/usr/bin/env bash
# Builds the local control plane (etcd and kube-apiserver) from Go modules into a cache
# folder, once per version: the library's own go.mod never sees these modules.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../.cache/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The heartbeat of the build in progress; killed on any exit, also a failed build.
beat=
trap '[ -z "$beat" ] || kill "$beat" 2>/dev/null || true' EXIT

build() { # name, module dir, package
	local name=$1 dir=$2 pkg=$3
	local stamp
	stamp=$(cd "$here/$dir" && sha256sum go.mod go.sum | sha256sum | cut -c1-16)
	if [ -x "$out/$name" ] && [ "$(cat "$out/$name.stamp" 2>/dev/null)" = "$stamp" ]; then
		echo "controlplane: $name is cached in $out"
		return
	fi
	echo "controlplane: building $name from $pkg (the first build takes a few minutes)..."
	local start=$SECONDS
	# A heartbeat, so that a first build of several minutes does not look hung.
	(while sleep 30; do echo "controlplane: still building $name ($((SECONDS - start))s)"; done) &
	beat=$!
	(cd "$here/$dir" && go build -trimpath -o "$out/$name.tmp" "$pkg")
	kill "$beat" 2>/dev/null || true
	beat=
	mv "$out/$name.tmp" "$out/$name"
	echo "$stamp" >"$out/$name.stamp"
	echo "controlplane: built $name in $((SECONDS - start))s"
}

build etcd etcd go.etcd.io/etcd/server/v3
build kube-apiserver kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
