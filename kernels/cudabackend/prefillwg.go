//go:build cuda

package cudabackend

import (
	"fmt"
	"os"
	"strings"
	"sync"

	kcuda "github.com/flextensor-go/flextensor/kernels/cuda"
	"github.com/flextensor-go/flextensor/runtime/cuda"
)

// prefillWG is one sm_90a module of the prefill attention on warpgroup
// MMA: SourceSM90a (variants wg and wg6, kernels/cuda/sm90a/) where
// extra is "", else SourceSM90aExtra(extra), an experimental variant's
// file of kernels/cuda/sm90a/extra (none now) compiled on its own so that its
// compile time and errors stay out of the default's module. Each is
// compiled and loaded once, on compute capability 9.0 only: when the
// backend is made with FT_PREFILL_VARIANT naming one of its variants, else
// on the first launch that asks for it. Where it cannot be had (another
// device, an NVRTC without sm_90a, a compile or load error) function
// returns nil, the launch falls back to wg, else fa2 (availablePrefill), and
// FT_TRACE=1 says why on stderr.
type prefillWG struct {
	dev   *cuda.Device
	extra string // "" or the file of kernels/cuda/sm90a/extra
	once  sync.Once
	fns   map[string]*cuda.Function // by kernel name; read-only once loaded
	err   error                     // why there are none
}

// newPrefillWGs makes the (not yet loaded) sm_90a modules of dev: "" for
// SourceSM90a and one per distinct extra file of prefillVariants.
func newPrefillWGs(dev *cuda.Device) map[string]*prefillWG {
	m := map[string]*prefillWG{"": {dev: dev}}
	for _, v := range prefillVariants {
		if v.sm90a && m[v.extra] == nil {
			m[v.extra] = &prefillWG{dev: dev, extra: v.extra}
		}
	}
	return m
}

// wantsPrefillWG reports whether a PrefillVariant setting runs a variant
// of an sm_90a module (wg, wg6), and which (its extra file, "" for wg's).
func wantsPrefillWG(setting string) (extra string, ok bool) {
	if setting == "" || setting == "auto" {
		setting = autoPrefillVariant
	}
	for _, v := range prefillVariants {
		if v.name == setting {
			return v.extra, v.sm90a
		}
	}
	return "", false
}

// load compiles and loads the module the first time.
func (w *prefillWG) load() {
	w.once.Do(func() {
		w.fns, w.err = loadPrefillWG(w.dev, w.extra)
		if w.err != nil && os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: sm_90a prefill module %q not loaded, its variants fall back (wg, else fa2): %v\n", w.extra, w.err)
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

// loadPrefillWG compiles the sm_90a module of extra ("" for SourceSM90a,
// else SourceSM90aExtra(extra)) for sm_90a and looks up the kernels of the
// sm90a variants built from it, letting each use its shared memory.
func loadPrefillWG(dev *cuda.Device, extra string) (map[string]*cuda.Function, error) {
	if cc := dev.ComputeCapability(); cc != 90 {
		return nil, fmt.Errorf("wgmma needs compute capability 9.0 (sm_90a); %s is %d.%d", dev.Name(), cc/10, cc%10)
	}
	src, name := kcuda.SourceSM90a(), "flextensor_sm90a.cu"
	if extra != "" {
		var err error
		if src, err = kcuda.SourceSM90aExtra(extra); err != nil {
			return nil, err
		}
		name = "flextensor_sm90a_" + strings.TrimSuffix(extra, ".cu") + ".cu"
	}
	mod, err := dev.LoadModuleArch(name, src, "sm_90a")
	if err != nil {
		return nil, err
	}
	fns := map[string]*cuda.Function{}
	for _, v := range prefillVariants {
		if !v.sm90a || v.extra != extra {
			continue
		}
		for _, d := range []int{64, 128} {
			if !v.hasWidth(d) {
				continue
			}
			// Fixed-length, varlen over the paged pool, packed ("": none).
			for _, name := range []string{v.kernel(d, false), v.kernel(d, true), v.contigKernel(d)} {
				if name == "" {
					continue
				}
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
