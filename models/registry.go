package models

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// Family is one model family: the config.json names that select it and how
// it builds a model from that config.
type Family struct {
	Name          string   // "llama"
	Architectures []string // config.json "architectures" entries it serves ("LlamaForCausalLM")
	ModelTypes    []string // config.json "model_type" values it serves ("llama")
	// New parses config.json (source names it in errors) and builds the
	// model with no weights bound.
	New func(configJSON []byte, source string) (*decoder.Model, error)
	// Shapes are the family's named shapes for random-weight checkpoints
	// (MakeCheckpoint, infer make-model): real sizes and tiny test ones.
	Shapes []Shape
}

// DecoderFamily is the Family of a Llama-style decoder family described by
// s: named after s.ModelType, serving s.Architecture and s.ModelType,
// building models with s.Build, and with the named shapes of table written
// by s.ConfigJSON (ShapesOf).
func DecoderFamily(s decoder.Spec, table map[string]decoder.Config) Family {
	return Family{
		Name:          s.ModelType,
		Architectures: []string{s.Architecture},
		ModelTypes:    []string{s.ModelType},
		New:           s.Build,
		Shapes:        ShapesOf(table, s.ConfigJSON),
	}
}

var (
	mu       sync.RWMutex
	families []Family
)

// Register adds f to the registry. It panics when f has no name or New, or
// claims an architecture or model type another family has, or takes a
// registered family's name with other claims: programmer errors at init
// time. Registering a name again with the same claims (architectures and
// model types) does nothing, so a family's Register may run more than once
// (llama.Register after its init); the first registration stays, even when
// the later one's New or Shapes differ: a family cannot be overridden.
func Register(f Family) {
	if f.Name == "" || f.New == nil {
		panic("models.Register: a family needs a Name and New")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range families {
		if g.Name == f.Name {
			if sameClaims(g, f) {
				return // registered twice (Register called after init): harmless
			}
			panic(fmt.Sprintf("models.Register: family %q registered twice", f.Name))
		}
		for _, a := range f.Architectures {
			if slices.Contains(g.Architectures, a) {
				panic(fmt.Sprintf("models.Register: architecture %s of %s is %s's", a, f.Name, g.Name))
			}
		}
		for _, t := range f.ModelTypes {
			if slices.Contains(g.ModelTypes, t) {
				panic(fmt.Sprintf("models.Register: model type %s of %s is %s's", t, f.Name, g.Name))
			}
		}
	}
	families = append(families, f)
}

func sameClaims(a, b Family) bool {
	return slices.Equal(a.Architectures, b.Architectures) && slices.Equal(a.ModelTypes, b.ModelTypes)
}

// Supported lists the registered architectures and model types, sorted, as
// "LlamaForCausalLM (model_type llama)".
func Supported() []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for _, f := range families {
		out = append(out, fmt.Sprintf("%s (model_type %s)", strings.Join(f.Architectures, ", "), strings.Join(f.ModelTypes, ", ")))
	}
	sort.Strings(out)
	return out
}

// Lookup finds the family of a config.json: by its "architectures" when the
// list is present (the first entry a family serves), else by "model_type".
// An unsupported one is an error listing the supported ones.
func Lookup(configJSON []byte, source string) (Family, error) {
	r, err := loader.ParseFields(configJSON, source)
	if err != nil {
		return Family{}, err
	}
	archs, typ := r.Strings("architectures"), r.Str("model_type", "")
	if err := r.Err(); err != nil {
		return Family{}, err
	}
	mu.RLock()
	for _, a := range archs {
		for _, f := range families {
			if slices.Contains(f.Architectures, a) {
				mu.RUnlock()
				return f, nil
			}
		}
	}
	if len(archs) == 0 {
		for _, f := range families {
			if slices.Contains(f.ModelTypes, typ) {
				mu.RUnlock()
				return f, nil
			}
		}
	}
	mu.RUnlock()
	what := fmt.Sprintf("model_type %q", typ)
	if len(archs) > 0 {
		what = fmt.Sprintf("architectures %q", archs)
	}
	sup := Supported()
	if len(sup) == 0 {
		sup = []string{"none registered; import models/all or a family such as models/llama"}
	}
	return Family{}, fmt.Errorf("config %s: %s is not supported; supported: %s", source, what, strings.Join(sup, "; "))
}

// New builds the model the config.json in dir describes, with no weights
// bound. The end-of-sequence tokens of generation_config.json, when there
// is one, join config.json's (ReadGenerationConfig).
func New(dir string) (*decoder.Model, error) {
	data, path, err := loader.ReadConfigFile(dir)
	if err != nil {
		return nil, err
	}
	f, err := Lookup(data, path)
	if err != nil {
		return nil, err
	}
	m, err := f.New(data, path)
	if err != nil {
		return nil, err
	}
	if err := applyGeneration(m, dir); err != nil {
		return nil, err
	}
	return m, nil
}

// Load builds the model of the checkpoint in dir (New) and binds its
// weights on dev (decoder.Model.LoadCheckpoint). Close the model, then the
// checkpoint, when done. A nil dev is an error.
func Load(dir string, dev runtime.Device) (*decoder.Model, *loader.Checkpoint, error) {
	if dev == nil {
		return nil, nil, fmt.Errorf("models.Load %s: nil device", dir)
	}
	return decoder.Builder(checkedNew).Load(dir, dev)
}

// checkedNew is New after the checks that must come before a model is
// built: config.json names a supported family, and num_hidden_layers
// matches the layers the checkpoint holds (CheckLayers).
func checkedNew(dir string) (*decoder.Model, error) {
	if err := checkFamily(dir); err != nil {
		return nil, err
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	err = CheckLayers(dir, ck)
	ck.Close()
	if err != nil {
		return nil, err
	}
	return New(dir)
}

// checkFamily reports config.json errors and an unsupported family before
// the weights are opened.
func checkFamily(dir string) error {
	data, path, err := loader.ReadConfigFile(dir)
	if err != nil {
		return err
	}
	_, err = Lookup(data, path)
	return err
}

// CheckLayers compares config.json's num_hidden_layers in dir with the
// layers the checkpoint holds tensors for (names with a "layers.N."
// part), before a model of that many layers is built: a config that asks
// for more layers than the checkpoint has (num_hidden_layers 2147483647
// would build modules without end) or fewer is an error naming both.
func CheckLayers(dir string, ck *loader.Checkpoint) error {
	data, path, err := loader.ReadConfigFile(dir)
	if err != nil {
		return err
	}
	r, err := loader.ParseFields(data, path)
	if err != nil {
		return err
	}
	n := r.Positive("num_hidden_layers", 0)
	if err := r.Err(); err != nil {
		return err
	}
	have := CheckpointLayers(ck)
	switch {
	case have == 0:
		return nil // no layer tensors at all: binding names the missing ones
	case n > have:
		return fmt.Errorf("config %s: num_hidden_layers is %d, but the checkpoint in %s holds tensors for %d layers (0..%d)", path, n, dir, have, have-1)
	case n < have:
		return fmt.Errorf("config %s: num_hidden_layers is %d, but the checkpoint in %s holds tensors for %d layers: layers %d..%d would be ignored", path, n, dir, have, n, have-1)
	}
	return nil
}

// CheckpointLayers is one more than the largest N in the checkpoint's
// tensor names "...layers.N....", 0 when no name has one.
func CheckpointLayers(ck *loader.Checkpoint) int {
	most := -1
	for _, name := range ck.Names() {
		parts := strings.Split(name, ".")
		for i := 0; i+1 < len(parts); i++ {
			if parts[i] != "layers" {
				continue
			}
			if v, err := strconv.Atoi(parts[i+1]); err == nil && v >= 0 && v < 1<<30 {
				most = max(most, v)
			}
		}
	}
	return most + 1
}

// LoadFromProfile builds the model of the checkpoint in dir (New) and hands
// its weights to the offload engine with the profile st
// (decoder.LoadFromProfile).
func LoadFromProfile(dir string, st *offload.State, cfg offload.Config, name string, strict bool, opts ...offload.Option) (*decoder.Model, *loader.Checkpoint, error) {
	return decoder.Builder(checkedNew).LoadFromProfile(dir, st, cfg, name, strict, opts...)
}
