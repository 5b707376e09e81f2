package cudabackend

// gemvBalSplits are the segment counts a row of the split-K GEMVs
// (gemvbal.go, kernels/cuda/gemvpipe_bal.cu) comes in: FT_GEMV=bal2 and
// bal4.
var gemvBalSplits = []int{2, 4}

// gemvBalAuto is Backend.GEMVBal's value for FT_GEMV=bal: the split chosen
// per product (gemvBalAutoSplit; 1 = whole rows, the pipelined kernels).
const gemvBalAuto = 1
