package loader

import "sort"

// Keys lists the object's field names, sorted (for objects whose keys are
// names the reader does not know in advance, such as
// quantization_config.config_groups).
func (r *Fields) Keys() []string {
	out := make([]string, 0, len(r.m))
	for k := range r.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
