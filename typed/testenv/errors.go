package testenv

import "errors"

// ErrNoBinaries is matched, through errors.Is, by the error of [FindBinaries],
// [Start] and [StartContext] when etcd or kube-apiserver is missing or not
// executable. The error names the directory, where its name came from, and the
// one command that builds the binaries there.
var ErrNoBinaries = errors.New("testenv: etcd and kube-apiserver are needed")
