//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/runtime/kernelcache"
)

// Module is CUDA C++ compiled with NVRTC for this device and loaded.
type Module struct {
	dev  *Device
	name string
	m    cModule
	// Log is NVRTC's log of the compile (warnings), empty when it had none
	// or the module came from the kernel cache.
	Log string
	// Cached is true when the module was loaded from the kernel cache.
	Cached bool
}

// includeDirs are the toolkit include directories handed to NVRTC (the
// kernels include no headers today; this keeps #include <cuda_bf16.h> working).
func includeDirs() []string {
	var dirs []string
	for _, root := range []string{os.Getenv("CUDA_HOME"), os.Getenv("CUDA_PATH"), "/usr/local/cuda"} {
		if root == "" {
			continue
		}
		inc := filepath.Join(root, "include")
		if st, err := os.Stat(inc); err == nil && st.IsDir() {
			dirs = append(dirs, inc)
		}
	}
	return dirs
}

// LoadModule compiles src (CUDA C++, kernels declared extern "C") with NVRTC
// for this device's architecture (sm_XY), with extra options appended, and
// loads the cubin. Compile errors carry NVRTC's log. The cubin is kept in the
// device's kernel cache (Options.KernelCache): a later process with the same
// source, options, architecture, driver and NVRTC loads it without
// compiling; a cached image the driver refuses is compiled again.
func (d *Device) LoadModule(name, src string, extra ...string) (*Module, error) {
	return d.LoadModuleArch(name, src, "", extra...)
}

// LoadModuleArch is LoadModule for the architecture arch ("sm_90a": the
// architecture-specific features of Hopper, such as wgmma), or for this
// device's sm_XY where arch is "". An arch the device or NVRTC does not
// take fails with NVRTC's or the driver's error; the caller decides what
// runs instead.
func (d *Device) LoadModuleArch(name, src, arch string, extra ...string) (*Module, error) {
	if arch == "" {
		arch = fmt.Sprintf("sm_%d", d.cc)
	}
	opts := []string{
		"--gpu-architecture=" + arch,
		"--std=c++17",
		"-default-device",
	}
	// The include paths are left out of the key: where the toolkit is
	// installed does not change the image (its version is NVRTC's).
	keyOpts := append(append([]string{}, opts...), extra...)
	for _, inc := range includeDirs() {
		opts = append(opts, "--include-path="+inc)
	}
	opts = append(opts, extra...)
	maj, min := nvrtcVersion()
	key := kernelcache.Key{Name: name, Source: src, Options: keyOpts, Arch: d.cc, Driver: driverVersion(), NVRTCMajor: maj, NVRTCMinor: min}
	var log string
	compile := func() ([]byte, error) {
		image, l, err := nvrtcCompile(src, name, opts)
		log = l
		if err != nil {
			return nil, fmt.Errorf("%s: NVRTC %d.%d, options %s: %w\n%s", d.Name(), maj, min, strings.Join(opts, " "), err, strings.TrimSpace(l))
		}
		return image, nil
	}
	warn := func(err error) {
		if os.Getenv("FT_TRACE") == "1" {
			fmt.Fprintf(os.Stderr, "trace: kernel cache: %v\n", err)
		}
	}
	t0 := time.Now()
	image, hit, err := d.kcache.Load(key, compile, warn)
	if err != nil {
		return nil, err
	}
	m, err := cModuleLoad(d.ctx, image)
	if err != nil && hit {
		warn(fmt.Errorf("%s: the driver refused the cached %s (%v); compiling it again", d.Name(), name, err))
		if image, err = compile(); err != nil {
			return nil, err
		}
		if perr := d.kcache.Put(key, image); perr != nil {
			warn(perr)
		}
		hit = false
		m, err = cModuleLoad(d.ctx, image)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: loading module %s: %w", d.Name(), name, err)
	}
	if os.Getenv("FT_TRACE") == "1" {
		how := "compiled with NVRTC"
		if hit {
			how = "from the kernel cache"
		}
		fmt.Fprintf(os.Stderr, "trace: %-36s %9.1f ms\n", "module "+name+" "+how, float64(time.Since(t0).Microseconds())/1e3)
	}
	mod := &Module{dev: d, name: name, m: m, Log: strings.TrimSpace(log), Cached: hit}
	d.mu.Lock()
	d.modules = append(d.modules, mod)
	d.mu.Unlock()
	return mod, nil
}

func (m *Module) unload() error { return cModuleUnload(m.dev.ctx, m.m) }

// Function is a kernel of a module.
type Function struct {
	dev  *Device
	name string
	f    cFunction
	pdl  bool // may be launched with programmatic stream serialization (pdl.go)
	skip bool // FT_SKIP_KERNELS names it: launches are dropped (skip.go)
}

// Function looks up an extern "C" kernel by name.
func (m *Module) Function(name string) (*Function, error) {
	f, err := cModuleFunction(m.dev.ctx, m.m, name)
	if err != nil {
		return nil, fmt.Errorf("%s: module %s: %w", m.dev.Name(), m.name, err)
	}
	return &Function{dev: m.dev, name: name, f: f, skip: skipped(name)}, nil
}

// Global is the device address and size in bytes of the module's
// __device__ variable name (cuModuleGetGlobal); an unknown name fails with
// the driver's error.
func (m *Module) Global(name string) (uintptr, int64, error) {
	p, n, err := cModuleGlobal(m.dev.ctx, m.m, name)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: module %s: %w", m.dev.Name(), m.name, err)
	}
	return p, n, nil
}

// Name is the kernel's name.
func (f *Function) Name() string { return f.name }

// SetMaxDynamicSharedMemory lets launches ask for more than the default 48 KiB
// of dynamic shared memory.
func (f *Function) SetMaxDynamicSharedMemory(bytes int) error {
	if err := cFuncMaxSmem(f.dev.ctx, f.f, bytes); err != nil {
		return fmt.Errorf("kernel %s: %w", f.name, err)
	}
	return nil
}

// MaxActiveBlocksPerSM is how many blocks of block threads and smem bytes of
// dynamic shared memory fit on one multiprocessor at once (the occupancy
// calculator), for sizing persistent grids.
func (f *Function) MaxActiveBlocksPerSM(block, smem int) (int, error) {
	n, err := cOccupancy(f.dev.ctx, f.f, block, smem)
	if err != nil {
		return 0, fmt.Errorf("kernel %s: %w", f.name, err)
	}
	return n, nil
}

// Resources are the registers a thread of f uses and its local memory
// bytes (register spills and stack): a wgmma kernel that spills has lost
// the registers its schedule was written for.
func (f *Function) Resources() (regs, localBytes int, err error) {
	regs, localBytes, err = cFuncResources(f.dev.ctx, f.f)
	if err != nil {
		return 0, 0, fmt.Errorf("kernel %s: %w", f.name, err)
	}
	return regs, localBytes, nil
}

// Dim3 is a grid or block shape; zero extents count as 1.
type Dim3 struct{ X, Y, Z int }

func (d Dim3) u32() [3]uint32 {
	c := func(v int) uint32 {
		if v <= 0 {
			return 1
		}
		return uint32(v)
	}
	return [3]uint32{c(d.X), c(d.Y), c(d.Z)}
}

// Launch enqueues f on s over grid×block threads with smem bytes of dynamic
// shared memory. Each argument is one kernel parameter in an 8-byte slot:
// use Ptr, I32, U32, I64 and F32 to make them.
func (f *Function) Launch(s *Stream, grid, block Dim3, smem int, args ...uint64) error {
	return f.LaunchBytes(s, 0, grid, block, smem, args...)
}

// LaunchBytes is Launch that also says how many bytes the kernel reads and
// writes, for the achieved-bandwidth column of a kernel profile
// (Device.StartKernelProfile).
func (f *Function) LaunchBytes(s *Stream, bytes int64, grid, block Dim3, smem int, args ...uint64) error {
	if f.dev.kprof.Load() != nil {
		return f.dev.timed(s, f.name, bytes, func() error { return f.launch(s, grid, block, smem, args) })
	}
	return f.launch(s, grid, block, smem, args)
}

func (f *Function) launch(s *Stream, grid, block Dim3, smem int, args []uint64) error {
	if f.skip {
		return nil
	}
	if len(args) > maxLaunchArgs {
		return fmt.Errorf("kernel %s: %d arguments, at most %d", f.name, len(args), maxLaunchArgs)
	}
	if s.dev != f.dev {
		return fmt.Errorf("kernel %s of %s launched on a stream of %s", f.name, f.dev.Name(), s.dev.Name())
	}
	if err := f.enqueue(s, grid.u32(), block.u32(), uint32(smem), args); err != nil {
		return fmt.Errorf("kernel %s (grid %v, block %v, %d B shared): %w", f.name, grid, block, smem, err)
	}
	return nil
}

// Ptr is a device-pointer kernel argument.
func Ptr(p uintptr) uint64 { return uint64(p) }

// I32 is an int kernel argument.
func I32(v int) uint64 { return uint64(uint32(int32(v))) }

// U32 is an unsigned int kernel argument.
func U32(v uint32) uint64 { return uint64(v) }

// I64 is a long long kernel argument.
func I64(v int64) uint64 { return uint64(v) }

// F32 is a float kernel argument.
func F32(v float32) uint64 { return uint64(math.Float32bits(v)) }
