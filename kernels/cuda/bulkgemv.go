package cuda

import "embed"

//go:embed sm90a/gemv/*.cu
var sm90aGEMVFiles embed.FS

// SourceBulkGEMV is the translation unit of the one-token GEMVs that stream
// their weights with Hopper's bulk copies (sm90a/gemv/gemv_bulk.cu,
// FT_GEMV=bulk) and of the read-bandwidth probes: common.cuh, then the .cu
// files of sm90a/gemv/. It needs sm_90a's PTX (cp.async.bulk, mbarrier
// try_wait) and is compiled as a module of its own, apart from SourceSM90a,
// so that neither module's compile time or failure touches the other.
func SourceBulkGEMV() string { return unit(sm90aGEMVFiles, "sm90a/gemv") }

// KernelsBulkGEMV lists the extern "C" kernel names in SourceBulkGEMV.
func KernelsBulkGEMV() []string { return kernelsIn(SourceBulkGEMV()) }
