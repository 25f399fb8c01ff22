package webhook_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Server's Run has returned by the end of each test, and leaves no goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
