package guard

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

func TestLogRecoversAndLogsThePanicWithItsStack(t *testing.T) {
	tests := []struct {
		name     string
		handling error
		want     []string
	}{
		{"the panic is the error", nil, []string{`"msg"="callback panicked"`, `"error"="panic: boom"`, `"panic"="boom"`, `"k"="v"`, "TestLogRecoversAndLogsThePanicWithItsStack"}},
		{"the handled error is the error", errors.New("handled"), []string{`"error"="handled"`, `"panic"="boom"`, "TestLogRecoversAndLogsThePanicWithItsStack"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
			func() {
				defer LogPanic(logger, tt.handling, "callback panicked", "k", "v")
				panic("boom")
			}()
			if len(lines) != 1 {
				t.Fatalf("logged %q, want one line", lines)
			}
			for _, w := range tt.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("line %s lacks %s", lines[0], w)
				}
			}
		})
	}
}

func TestLogIsSilentWithoutAPanic(t *testing.T) {
	var lines []string
	logger := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})
	func() { defer LogPanic(logger, nil, "callback panicked") }()
	if len(lines) != 0 {
		t.Errorf("logged %q without a panic", lines)
	}
}
