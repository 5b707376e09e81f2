package decoder

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// Builder builds the model of the checkpoint in dir with no weights bound:
// a family's config reader, or the models registry's lookup.
type Builder func(dir string) (*Model, error)

// Load builds the model of the checkpoint in dir and binds its weights on
// dev (Model.LoadCheckpoint). Close the model, then the checkpoint, when
// done.
func (build Builder) Load(dir string, dev runtime.Device) (*Model, *loader.Checkpoint, error) {
	m, err := build(dir)
	if err != nil {
		return nil, nil, err
	}
	ck, err := m.LoadCheckpoint(dir, dev)
	if err != nil {
		return nil, nil, err
	}
	return m, ck, nil
}

// LoadFromProfile builds the model of the checkpoint in dir and hands its
// weights to the offload engine with the profile st (LoadFromProfile).
func (build Builder) LoadFromProfile(dir string, st *offload.State, cfg offload.Config, name string, strict bool, opts ...offload.Option) (*Model, *loader.Checkpoint, error) {
	m, err := build(dir)
	if err != nil {
		return nil, nil, err
	}
	ck, err := LoadFromProfile(m, dir, st, cfg, name, strict, opts...)
	if err != nil {
		return nil, nil, err
	}
	return m, ck, nil
}
