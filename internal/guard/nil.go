package guard

import "reflect"

// IsNil reports whether v is nil or a typed nil (a nil pointer, map, slice, channel or
// function in an interface), which a comparison with nil does not catch.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
