package decoder

import (
	"fmt"
	"sort"
	"strings"

	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// LoadFromProfile binds m (built, with no weights bound) to the checkpoint
// in dir on the meta device (no weight is read for that) and hands its
// weights to the offload engine with the profile st: resident weights are
// read from the files into device memory and streamed ones into pinned
// blocks, each byte once, with no full copy of the model in host memory.
// cfg.Device is the compute device.
//
// With strict, every tensor the profile names must be in the checkpoint and
// the error lists all that are missing; otherwise the first tensor the model
// needs and the checkpoint lacks is the error. Close the model (after
// releasing the manager) and the checkpoint when done.
func LoadFromProfile(m *Model, dir string, st *offload.State, cfg offload.Config, name string, strict bool, opts ...offload.Option) (*loader.Checkpoint, error) {
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if strict {
		have := map[string]bool{}
		for _, n := range ck.Names() {
			have[n] = true
		}
		var missing []string
		for _, t := range st.Tensors {
			if !have[t.Name] {
				missing = append(missing, t.Name)
			}
		}
		if len(missing) > 0 {
			ck.Close()
			sort.Strings(missing)
			return nil, fmt.Errorf("checkpoint %s lacks %d tensors of the profile (strict mode): %s",
				dir, len(missing), strings.Join(missing, ", "))
		}
	}
	if err := m.BindCheckpoint(ck, runtime.NewMeta()); err != nil {
		ck.Close()
		return nil, err
	}
	if err := offload.LoadModelFromProfile(m, ck, st, &cfg, name, opts...); err != nil {
		m.Close()
		ck.Close()
		return nil, err
	}
	return ck, nil
}
