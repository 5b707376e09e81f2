package models

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/flextensor-go/flextensor/models/decoder"
)

// Shape is a named model shape of a family: the config.json a random-weight
// checkpoint of it has (MakeCheckpoint).
type Shape struct {
	Name   string // "qwen3-8b"; unique over all families
	Config []byte // config.json, transformers 5 layout
}

// ShapeNames lists every registered family's shape names, sorted.
func ShapeNames() []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for _, f := range families {
		for _, s := range f.Shapes {
			out = append(out, s.Name)
		}
	}
	sort.Strings(out)
	return out
}

// FindShape returns the shape called name and its family; an unknown name is
// an error listing the known ones.
func FindShape(name string) (Family, Shape, error) {
	mu.RLock()
	for _, f := range families {
		for _, s := range f.Shapes {
			if s.Name == name {
				mu.RUnlock()
				return f, s, nil
			}
		}
	}
	mu.RUnlock()
	return Family{}, Shape{}, fmt.Errorf("model shape %q is unknown (known: %s)", name, strings.Join(ShapeNames(), ", "))
}

// ShapeConfig is the config.json of the shape called name, with
// num_hidden_layers set to layers when layers > 0 (and a layer_types list,
// if the config has one, cut or extended to match).
func ShapeConfig(name string, layers int) (Family, []byte, error) {
	f, s, err := FindShape(name)
	if err != nil {
		return Family{}, nil, err
	}
	if layers < 0 {
		return Family{}, nil, fmt.Errorf("model shape %s: %d layers is negative", name, layers)
	}
	if layers == 0 {
		return f, s.Config, nil
	}
	var m map[string]any
	if err := json.Unmarshal(s.Config, &m); err != nil {
		return Family{}, nil, fmt.Errorf("model shape %s: %w", name, err)
	}
	m["num_hidden_layers"] = layers
	if lt, ok := m["layer_types"].([]any); ok && len(lt) > 0 {
		out := make([]any, layers)
		for i := range out {
			out[i] = lt[min(i, len(lt)-1)]
		}
		m["layer_types"] = out
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Family{}, nil, err
	}
	return f, append(data, '\n'), nil
}

// MakeCheckpoint writes a random-weight checkpoint of the shape called name
// into dir (decoder.WriteRandomCheckpoint): its config.json, with
// num_hidden_layers overridden when layers > 0, and BF16 safetensors shards
// of at most shardBytes. The same seed gives the same bytes.
func MakeCheckpoint(dir, name string, layers int, seed uint64, shardBytes int64) error {
	return MakeCheckpointFormat(dir, name, decoder.FormatBF16, layers, seed, shardBytes)
}

// MakeCheckpointFormat is MakeCheckpoint with the weights in format
// (decoder.Formats): bf16, or FP8 Linears in one of the Hub's two layouts
// (fp8-channel, fp8-block), config.json carrying the quantization_config.
func MakeCheckpointFormat(dir, name, format string, layers int, seed uint64, shardBytes int64) error {
	f, data, err := ShapeConfig(name, layers)
	if err != nil {
		return err
	}
	qc, err := decoder.QuantizationConfig(format)
	if err != nil {
		return err
	}
	if qc != nil {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("model shape %s: %w", name, err)
		}
		m["quantization_config"] = qc
		if data, err = json.MarshalIndent(m, "", "  "); err != nil {
			return err
		}
		data = append(data, '\n')
	}
	m, err := f.New(data, "shape "+name)
	if err != nil {
		return err
	}
	return decoder.WriteRandomCheckpoint(dir, m, data, seed, shardBytes)
}

// ShapesOf makes a family's Shapes from a table of decoder configs and the
// family's config.json writer. It panics when the writer fails: the tables
// are fixed values.
func ShapesOf(table map[string]decoder.Config, write func(*decoder.Config) ([]byte, error)) []Shape {
	var names []string
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Shape
	for _, n := range names {
		c := table[n]
		data, err := write(&c)
		if err != nil {
			panic(fmt.Sprintf("models: shape %s: %v", n, err))
		}
		out = append(out, Shape{Name: n, Config: data})
	}
	return out
}
