package client

import "io"

// Where the objects' managedFields are in the two streams the direct decoders read: each
// watch event's object, each item of a list. "*" is any element of an array.
var (
	watchManagedFields = []string{"object", "metadata", "managedFields"}
	listManagedFields  = []string{"items", "*", "metadata", "managedFields"}
)

// omitter reads a JSON stream and passes it on with the value at path (see
// watchManagedFields) replaced by null wherever it occurs, so that the decoder after it
// neither decodes nor allocates what the cache would drop at once: a custom resource's
// managedFields are often half its JSON.
//
// It changes nothing else. It reads each byte once, tracking strings and nesting, and
// does not validate: the decoder after it reports the syntax errors, but for those inside
// a value it replaced. A key written with escapes is not recognised, and its value is
// kept (for the transform to drop).
type omitter struct {
	r    io.Reader
	path []string
	in   []byte // read from r; in[next:] is not yet filtered
	next int
	// out holds the part of a replacement that did not fit into the caller's buffer.
	out []byte
	// err is what r returned with the last bytes of in.
	err error

	inString, escaped bool
	// stack holds, for each open object or array, whether it is on path (each key from
	// the stream's top to it is path's) and whether it is an object.
	stack []level
	// expectKey: the next string, in the innermost object, is a key.
	expectKey bool
	// key collects the key being read while it may be on path; keyOK says it still may.
	key   []byte
	keyOK bool
	// onPath: the value after the last colon is on path.
	onPath bool
	// skip: the value being read is left out. skipDepth counts its open brackets;
	// scalar says it is a number or a literal, which ends at the first byte after it.
	skip      bool
	skipDepth int
	scalar    bool
	// valueSeen: the value being left out has begun, and null was written for it.
	valueSeen bool
}

type level struct{ onPath, object bool }

func newOmitter(r io.Reader, path []string) *omitter {
	return &omitter{r: r, path: path, in: make([]byte, 0, 32<<10)}
}

// Read fills p with the filtered stream.
func (o *omitter) Read(p []byte) (int, error) {
	n := copy(p, o.out)
	o.out = o.out[n:]
	for n == 0 && len(p) > 0 {
		if o.next == len(o.in) {
			if o.err != nil {
				return 0, o.err
			}
			m, err := o.r.Read(o.in[:cap(o.in)])
			o.in, o.next = o.in[:m], 0
			if m == 0 {
				return 0, err
			}
			// An error that came with data is returned once the data is passed on.
			o.err = err
		}
		n = o.filter(p)
	}
	return n, nil
}

// filter moves the bytes of in to p, as many as fit, leaving out what is skipped, and
// returns how many it wrote. The part of a replacement that does not fit goes to out.
func (o *omitter) filter(p []byte) int {
	w := 0
	for o.next < len(o.in) && w < len(p) && len(o.out) == 0 {
		if o.inString && !o.escaped && !o.keyOK {
			// Most of a stream is strings, which change nothing up to their next quote
			// or backslash: move them at once.
			end := len(o.in)
			if !o.skip {
				end = min(end, o.next+len(p)-w)
			}
			i := o.next
			for i < end && o.in[i] != '"' && o.in[i] != '\\' {
				i++
			}
			if i > o.next {
				if !o.skip {
					w += copy(p[w:], o.in[o.next:i])
				}
				o.next = i
				continue
			}
		}
		c := o.in[o.next]
		if o.skip {
			starts := !o.valueSeen && c != ' ' && c != '\t' && c != '\n' && c != '\r'
			if o.skipByte(c) {
				o.next++
				if starts {
					// null stands for the value from its first byte on: a value that is
					// missing (a colon, then a brace) stays the syntax error it is.
					o.valueSeen = true
					m := copy(p[w:], "null")
					w += m
					o.out = append(o.out[:0], "null"[m:]...)
				}
				continue
			}
			o.skip = false // c is the first byte after the value: the stream's
		}
		o.next++
		p[w] = c
		w++
		o.step(c)
	}
	return w
}

// step advances the state over c, a byte passed on.
func (o *omitter) step(c byte) {
	if o.inString {
		switch {
		case o.escaped:
			o.escaped = false
		case c == '\\':
			o.escaped, o.keyOK = true, false
		case c == '"':
			o.inString = false
		case o.keyOK && len(o.key) < 64:
			o.key = append(o.key, c)
		default:
			o.keyOK = false
		}
		return
	}
	d := len(o.stack)
	switch c {
	case ' ', '\t', '\n', '\r':
		return
	case '"':
		o.inString = true
		o.keyOK = o.expectKey && o.stack[d-1].onPath && d <= len(o.path)
		o.key = o.key[:0]
		o.expectKey = false
		return
	case ':':
		o.onPath = o.keyOK && d >= 1 && d <= len(o.path) && o.path[d-1] != "*" && string(o.key) == o.path[d-1]
		if o.onPath && d == len(o.path) {
			o.skip, o.skipDepth, o.scalar, o.valueSeen, o.onPath = true, 0, false, false, false
		}
	case '{', '[':
		onPath := d == 0 // the stream's values
		if d > 0 {
			if o.stack[d-1].object {
				onPath = o.onPath
			} else {
				onPath = o.stack[d-1].onPath && d <= len(o.path) && o.path[d-1] == "*"
			}
		}
		o.stack = append(o.stack, level{onPath: onPath, object: c == '{'})
		o.expectKey, o.onPath = c == '{', false
	case '}', ']':
		if d > 0 {
			o.stack = o.stack[:d-1]
		}
		o.expectKey, o.onPath = false, false
	case ',':
		o.expectKey = d > 0 && o.stack[d-1].object
		o.onPath = false
	}
	o.keyOK = false
}

// skipByte advances over c while a value is left out, and reports whether c is part of
// it. It ends skip after the last byte of a string, object or array; a number or literal
// ends at the first byte that is not its own, for which it returns false.
func (o *omitter) skipByte(c byte) bool {
	if o.inString {
		switch {
		case o.escaped:
			o.escaped = false
		case c == '\\':
			o.escaped = true
		case c == '"':
			o.inString = false
			o.skip = o.skipDepth > 0
		}
		return true
	}
	switch c {
	case ' ', '\t', '\n', '\r':
		return !o.scalar
	case '"', '{', '[':
		if o.scalar {
			return false
		}
		if c == '"' {
			o.inString = true
		} else {
			o.skipDepth++
		}
	case '}', ']':
		if o.skipDepth == 0 {
			return false // the end of the object around the value
		}
		o.skipDepth--
		o.skip = o.skipDepth > 0
	case ',':
		return o.skipDepth > 0
	default:
		o.scalar = o.scalar || o.skipDepth == 0
	}
	return true
}
