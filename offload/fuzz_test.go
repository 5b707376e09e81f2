package offload_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// fuzzDeviceLimit bounds the compute device of FuzzProfile, so that a plan
// asking for absurd transfer blocks fails its allocation instead of taking
// the machine's memory.
const fuzzDeviceLimit = 16 << 20

// FuzzProfile feeds arbitrary bytes as profile.json through ReadProfile and
// State.Validate against the tiny Llama model, and offloads the model with
// every profile that passes (OffloadFromState). Nothing may panic; a profile
// the engine accepts must compute the resident model's logits exactly or
// fail with an error ("never a wrong answer"); and whatever happens, Release
// (or the failed offload) returns the device and pinned memory to where it
// was and leaves the model bound to its own weights. The seed corpus in
// testdata/fuzz/FuzzProfile holds profiles saved by the engine and damaged
// copies of them.
func FuzzProfile(f *testing.F) {
	host, dev := runtime.NewCPU(0), runtime.NewCPU(fuzzDeviceLimit)
	model, ck, err := llama.Load(tinyDir, host)
	if err != nil {
		f.Fatal(err)
	}
	plain, err := kernels.NewCPUBackend(dev)
	if err != nil {
		f.Fatal(err)
	}
	strict := strictBackend{plain, dev}
	prompt := []int32{11, 300, 7, 42}
	cache, err := model.NewKVCache(plain, len(prompt))
	if err != nil {
		f.Fatal(err)
	}
	forward := func(b kernels.Backend) ([]float32, error) {
		cache.Reset()
		lt, err := model.Forward(b, cache, prompt, false)
		if err != nil {
			return nil, err
		}
		out := make([]float32, lt.NumElements())
		return out, b.ReadF32(out, lt)
	}
	// The reference: the model on its host weights, computed on the compute
	// device (which also places the model's workspace there for good, so
	// the device's bytes in use are the baseline of every iteration).
	want, err := forward(plain)
	if err != nil {
		f.Fatal(err)
	}
	origs := map[*nn.Parameter]*runtime.Tensor{}
	for _, p := range nn.Parameters(model) {
		origs[p] = p.Peek()
	}
	baseDev, baseHost := dev.Memory().InUse, dev.HostMemory().InUse
	dir := f.TempDir()
	const name = "fuzz-profile"
	f.Cleanup(func() {
		cache.Free()
		model.Close()
		ck.Close()
		if err := dev.Close(); err != nil {
			f.Error(err)
		}
		host.Close()
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, offload.ProfileFileName)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := offload.ReadProfile(dir)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadProfile error does not name the file: %v", err)
			}
			return
		}
		if err := st.Validate(model); err != nil {
			if !errors.Is(err, offload.ErrProfileMismatch) && !errors.Is(err, offload.ErrProfileSchema) {
				t.Fatalf("Validate error is neither a mismatch nor a schema error: %v", err)
			}
			return
		}
		cfg := offload.DefaultConfig(dev)
		offErr := offload.OffloadFromState(model, st, &cfg, name, false)
		var fwdErr error
		if offErr == nil {
			var got []float32
			got, fwdErr = forward(strict)
			if fwdErr == nil && !slices.Equal(got, want) {
				t.Fatal("an accepted profile computed different logits from the resident model")
			}
			if err := offload.Release(name, true); err != nil && fwdErr == nil {
				t.Fatalf("Release after a good forward: %v", err)
			}
		}
		if m := dev.Memory(); m.InUse != baseDev {
			t.Fatalf("device bytes %d, want the baseline %d (offload: %v, forward: %v)", m.InUse, baseDev, offErr, fwdErr)
		}
		if h := dev.HostMemory(); h.InUse != baseHost {
			t.Fatalf("pinned bytes %d, want the baseline %d (offload: %v, forward: %v)", h.InUse, baseHost, offErr, fwdErr)
		}
		for p, orig := range origs {
			if p.Peek() != orig {
				t.Fatalf("parameter %s is not bound to its own tensor after Release (offload: %v, forward: %v)", p.Name(), offErr, fwdErr)
			}
		}
	})
}

// TestProfileUnitParamsNamed: found by FuzzProfile (seed
// unit_param_renamed): a profile whose unit lists a parameter the model's
// unit does not have is refused with an error that shows both lists (it
// used to print the unit's name and size twice, identical on both sides).
func TestProfileUnitParamsNamed(t *testing.T) {
	pdir, _ := profiled(t, tinyDir, []int32{1, 2})
	dir := writeProfile(t, pdir, func(v map[string]any) {
		u := v["units"].([]any)[1].(map[string]any)
		u["params"].([]any)[3] = "mofel.layers.1.self_attn.v_proj.weight"
	})
	f := newFixture(t, tinyDir, 0)
	cfg := offload.DefaultConfig(f.dev)
	err := offload.OffloadFromProfile(f.model, dir, &cfg, uniqueName(t))
	if !errors.Is(err, offload.ErrProfileMismatch) || !strings.Contains(err.Error(), "mofel.layers.1.self_attn.v_proj.weight") ||
		!strings.Contains(err.Error(), `"model.layers.1.self_attn.v_proj.weight"`) {
		t.Fatalf("error = %v; want a mismatch showing both parameter lists", err)
	}
}
