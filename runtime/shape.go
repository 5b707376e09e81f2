package runtime

import (
	"fmt"
	"strings"
)

// Shape is a tensor's extent along each dimension, outermost first (row-major).
type Shape []int

// NumElements is the product of the dimensions (1 for a scalar shape).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether two shapes have the same dimensions.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Validate returns an error when a dimension is negative.
func (s Shape) Validate() error {
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("shape %v: dimension %d is negative", s, i)
		}
	}
	return nil
}

// Clone returns a copy that shares nothing with s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// String prints the shape as [a b c].
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
