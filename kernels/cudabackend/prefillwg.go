//go:build cuda

package cudabackend

import (
	"fmt"
	"os"
	"sync"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// prefillWG is the sm_90a module of the prefill attention on warpgroup MMA
// (variant wg, kernels/cuda/sm90a/prefill_wg.cu). It is compiled and
// loaded once, on compute capability 9.0 only: when the backend is made
// with FT_PREFILL_VARIANT=wg, else on the first launch that asks for it.
// Where it cannot be had (another device, an NVRTC without sm_90a, a
// compile or load error) function returns nil, the launch falls back to
// fa2 (availablePrefill), and FT_TRACE=1 says why on stderr.
type prefillWG struct {
	dev  *cuda.Device
	once sync.Once
	fns  map[string]*cuda.Function // by kernel name; read-only once loaded
	err  error                     // why there are none
}

// wantsPrefillWG reports whether a PrefillVariant setting runs a variant
// of the sm_90a module (wg, wg2).
func wantsPrefillWG(setting string) bool {
	if setting == "" || setting == "auto" {
		setting = autoPrefillVariant
	}
	for _, v := range prefillVariants {
		if v.name == setting {
			return v.sm90a
		}
	}
	return false
}

// load compiles and loads the module the first time.
func (w *prefillWG) load() {
	w.once.Do(func() {
		w.fns, w.err = loadPrefillWG(w.dev)
		if w.err != nil && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: prefill variant wg unavailable, fa2 runs instead: %v\n", w.err)
		}
	})
}

// function is the kernel name of the sm_90a module, or nil where the
// module could not be had.
func (w *prefillWG) function(name string) *cuda.Function {
	if w == nil {
		return nil
	}
	w.load()
	return w.fns[name]
}

// loadPrefillWG compiles kcuda.SourceSM90a for sm_90a and looks up the
// kernels of the sm90a variants, letting each use its shared memory.
func loadPrefillWG(dev *cuda.Device) (map[string]*cuda.Function, error) {
	if cc := dev.ComputeCapability(); cc != 90 {
		return nil, fmt.Errorf("wgmma needs compute capability 9.0 (sm_90a); %s is %d.%d", dev.Name(), cc/10, cc%10)
	}
	mod, err := dev.LoadModuleArch("flextensor_sm90a.cu", kcuda.SourceSM90a(), "sm_90a")
	if err != nil {
		return nil, err
	}
	fns := map[string]*cuda.Function{}
	for _, v := range prefillVariants {
		if !v.sm90a {
			continue
		}
		for _, d := range []int{64, 128} {
			if !v.hasWidth(d) {
				continue
			}
			for _, varlen := range []bool{false, true} {
				name := v.kernel(d, varlen)
				f, err := mod.Function(name)
				if err != nil {
					return nil, err
				}
				if err := f.SetMaxDynamicSharedMemory(v.smem(d)); err != nil {
					return nil, err
				}
				fns[name] = f
			}
		}
	}
	return fns, nil
}
