#!/usr/bin/env bash
# Builds the local control plane (etcd and kube-apiserver) from Go modules into a cache
# folder (default: .cache/bin), once per version: the library's own go.mod never sees
# these modules. The building is done by the setup command that users of package
# typed/testenv run too (go run github.com/typedinformer/typedinformer/typed/testenv/setup).
#
# The versions are pinned by the tool modules next to this script, etcd/ and
# kube-apiserver/ (bump one with `go get` and `go mod tidy` in its directory). The setup
# command embeds copies of their go.mod and go.sum: after changing a tool module, run
# `go generate ./typed/testenv/internal/binaries` (a test fails until you do).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../.cache/bin}
cd "$here/../.."
"${GO:-go}" run ./typed/testenv/setup -go "${GO:-go}" -o "$out" >/dev/null
