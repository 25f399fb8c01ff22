package watchrecord_test

import (
	"fmt"

	"github.com/typedinformer/typedinformer/internal/testsupport/watchrecord"
)

func ExampleLoad() {
	rec, events, err := watchrecord.Load("../../../testdata/watch/configmaps.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d listed, %d watch events (the first %s), %d in the final list\n",
		len(rec.List.Items), len(events), events[0].Type, len(rec.Final.Items))
	// Output: 5 listed, 12 watch events (the first MODIFIED), 6 in the final list
}
