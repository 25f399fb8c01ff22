package guard

import (
	"context"
	"testing"
)

func TestIsNilSeesTypedNils(t *testing.T) {
	var ptr *int
	var fn func()
	var m map[string]int
	var s []int
	var ch chan int
	var iface context.Context
	tests := []struct {
		name string
		v    any
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil pointer", ptr, true},
		{"nil func", fn, true},
		{"nil map", m, true},
		{"nil slice", s, true},
		{"nil chan", ch, true},
		{"nil interface value", iface, true},
		{"a value", 1, false},
		{"a non-nil pointer", new(int), false},
		{"a non-nil func", func() {}, false},
		{"an empty struct", struct{}{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsNil(tt.v); got != tt.want {
				t.Errorf("IsNil(%#v) = %v, want %v", tt.v, got, tt.want)
			}
		})
	}
}
