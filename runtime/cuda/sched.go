package cuda

import (
	"fmt"
	"os"
)

// How a host thread waits for the GPU (cuStreamSynchronize, cuEventSynchronize,
// cuCtxSynchronize): the scheduling bits of the primary context's flags,
// CU_CTX_SCHED_* in cuda.h (the cuda build checks the values against the
// header).
const (
	SchedAuto     = 0x0 // CU_CTX_SCHED_AUTO: the driver's choice (spin when the GPU's contexts are fewer than the host's cores, else yield)
	SchedSpin     = 0x1 // CU_CTX_SCHED_SPIN: spin on a core
	SchedYield    = 0x2 // CU_CTX_SCHED_YIELD: spin, yielding the core between looks
	SchedBlocking = 0x4 // CU_CTX_SCHED_BLOCKING_SYNC: sleep on a synchronization primitive
	schedMask     = 0x7 // CU_CTX_SCHED_MASK
)

// SchedEnv names the A/B switch ParseSched reads: FT_CUDA_SCHED=spin|yield|blocking
// (unset or auto: the driver's default).
const SchedEnv = "FT_CUDA_SCHED"

// ParseSched maps a FT_CUDA_SCHED value to its CU_CTX_SCHED_* bits; set
// reports whether the value asks to change the context's flags at all
// ("" leaves them as they are; "auto" sets CU_CTX_SCHED_AUTO explicitly).
func ParseSched(v string) (flags uint32, set bool, err error) {
	switch v {
	case "":
		return 0, false, nil
	case "auto":
		return SchedAuto, true, nil
	case "spin":
		return SchedSpin, true, nil
	case "yield":
		return SchedYield, true, nil
	case "blocking":
		return SchedBlocking, true, nil
	}
	return 0, false, fmt.Errorf("%s=%q: want auto, spin, yield or blocking", SchedEnv, v)
}

// withSched returns the context flags old with its scheduling bits replaced
// by sched (the other flags kept).
func withSched(old, sched uint32) uint32 { return old&^schedMask | sched&schedMask }

// schedFromEnv is ParseSched of FT_CUDA_SCHED.
func schedFromEnv() (uint32, bool, error) { return ParseSched(os.Getenv(SchedEnv)) }
