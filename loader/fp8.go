package loader

import (
	"bytes"
	"encoding/json"

	"github.com/flextensor-go/flextensor/runtime"
)

// The safetensors library this package validates headers with
// (github.com/nlpodyssey/safetensors) predates the 8-bit float dtypes: it
// rejects "F8_E4M3" and "F8_E5M2" as invalid dtype strings. Both are one
// byte an element, so rewriteFP8DTypes hands the library a copy of the
// header in which they read "U8" — every other check (offsets, sizes,
// tiling) stays the library's and this package's — and remembers which
// tensors really hold which 8-bit float.

// fp8DTypeNames are the safetensors spellings of the 8-bit floats.
var fp8DTypeNames = map[string]runtime.DType{"F8_E4M3": runtime.F8E4M3, "F8_E5M2": runtime.F8E5M2}

// rewriteFP8DTypes returns header with every tensor's "F8_E4M3"/"F8_E5M2"
// dtype replaced by "U8", and those tensors' real dtypes by name. A header
// without such a dtype, or one that is not a JSON object of objects (the
// library then reports what is wrong with it), comes back unchanged.
func rewriteFP8DTypes(header []byte) ([]byte, map[string]runtime.DType) {
	if !bytes.Contains(header, []byte(`"F8_`)) {
		return header, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(header, &top); err != nil {
		return header, nil
	}
	var real map[string]runtime.DType
	for name, raw := range top {
		if name == "__metadata__" {
			continue
		}
		var entry map[string]json.RawMessage
		if err := json.Unmarshal(raw, &entry); err != nil {
			return header, nil
		}
		var dt string
		if err := json.Unmarshal(entry["dtype"], &dt); err != nil {
			continue // absent or not a string: the library says so
		}
		d, ok := fp8DTypeNames[dt]
		if !ok {
			continue
		}
		entry["dtype"] = json.RawMessage(`"U8"`)
		b, err := json.Marshal(entry)
		if err != nil {
			return header, nil
		}
		top[name] = b
		if real == nil {
			real = map[string]runtime.DType{}
		}
		real[name] = d
	}
	if real == nil {
		return header, nil
	}
	out, err := json.Marshal(top)
	if err != nil {
		return header, nil
	}
	return out, real
}
