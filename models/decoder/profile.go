package decoder

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/place"
	"github.com/flextensor-go/flextensor/runtime"
)

// LoadFromProfile binds m (built, with no weights bound) to the checkpoint
// in dir on the meta device (no weight is read for that) and hands its
// weights to the offload engine with the profile st: resident weights are
// read from the files into device memory and streamed ones into pinned
// blocks, each byte once, with no full copy of the model in host memory.
// cfg.Device is the compute device.
//
// With strict, every tensor the profile names must be in the checkpoint,
// else an error wrapping offload.ErrProfileMismatch that counts the missing
// ones and names the first few (offload.MissingTensorsError); otherwise tensors the checkpoint
// lacks are filled with zeros of the profile's dtype and shape
// (offload.FillMissing; the seed's strict=False). Close the model (after
// releasing the manager) and the checkpoint when done.
func LoadFromProfile(m *Model, dir string, st *offload.State, cfg offload.Config, name string, strict bool, opts ...offload.Option) (*loader.Checkpoint, error) {
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	src, missing := offload.FillMissing(ck, st)
	if strict && len(missing) > 0 {
		ck.Close()
		return nil, offload.MissingTensorsError("checkpoint "+dir, missing)
	}
	if len(missing) == 0 {
		err = m.BindCheckpoint(ck, runtime.NewMeta())
	} else { // the zero-filled tensors need shapes too: bind from the filled source
		_, err = place.Bind(m, src, runtime.NewMeta(),
			place.WithShapes(m.ParamShapes(), "the config ("+m.Cfg.Summary()+")"),
			place.WithDTypes(SupportedWeightDType, "the kernels take BF16, F16 or F32 weights"))
	}
	if err != nil {
		ck.Close()
		return nil, err
	}
	if _, err := offload.LoadModelFromProfile(m, ck, st, &cfg, name, offload.LoadOptions{Strict: strict}, opts...); err != nil {
		m.Close()
		ck.Close()
		return nil, err
	}
	return ck, nil
}
