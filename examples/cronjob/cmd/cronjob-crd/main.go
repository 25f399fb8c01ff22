// Command cronjob-crd writes the CronJob's CustomResourceDefinition (package
// cronjob) as YAML, for users who apply manifests:
//
//	go run ./examples/cronjob/cmd/cronjob-crd | kubectl apply --server-side -f -
//
// The schema of the embedded Job template comes from the Go types by
// reflection, so no cluster is needed; a program with a cluster can build it
// from the server's OpenAPI (crd.Definition.BuildFromServer) and install it
// (crd.Install) instead. Write the same lines for your own types: Go cannot
// load a type by its name, so the command is yours.
package main

import (
	"fmt"
	"os"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed/crd"
)

func main() {
	def, err := cronjob.Definition().Build()
	if err == nil {
		err = crd.WriteYAML(os.Stdout, def)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cronjob-crd:", err)
		os.Exit(1)
	}
}
