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
			fmt.Fprintf(os.Stderr, "trace: sm_90a prefill kernels (%d loaded) incomplete, fa2 runs instead of the others: %v\n", len(w.fns), w.err)
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
// kernels of the sm90a variants, letting each use its shared memory. Where
// the whole source does not compile it compiles it again without the
// experimental variants' files (sm90aOptional), so that wg still loads,
// and returns its kernels with the first error; their variants then fall
// back to fa2.
func loadPrefillWG(dev *cuda.Device) (map[string]*cuda.Function, error) {
	if cc := dev.ComputeCapability(); cc != 90 {
		return nil, fmt.Errorf("wgmma needs compute capability 9.0 (sm_90a); %s is %d.%d", dev.Name(), cc/10, cc%10)
	}
	src := kcuda.SourceSM90a()
	mod, err := dev.LoadModuleArch("flextensor_sm90a.cu", src, "sm_90a")
	var dropped error
	skip := map[string]bool{}
	if err != nil {
		for _, o := range sm90aOptional {
			src = withoutSM90aFile(src, o.file)
			skip[o.variant] = true
		}
		var err2 error
		if mod, err2 = dev.LoadModuleArch("flextensor_sm90a.cu", src, "sm_90a"); err2 != nil {
			return nil, err
		}
		dropped = fmt.Errorf("sm_90a module without the optional variants: %w", err)
	}
	fns := map[string]*cuda.Function{}
	for _, v := range prefillVariants {
		if !v.sm90a || skip[v.name] {
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
	return fns, dropped
}
