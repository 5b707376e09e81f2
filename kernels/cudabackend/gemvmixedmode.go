package cudabackend

// gemvMixed is the FT_GEMV value that runs the one-token q/k/v on gemv.cu's
// gemv3_bf16 and every other one-token BF16 GEMV on its pipelined twin
// (gemvpipe.go): Backend.GEMVPersistQKV with GEMVPipe "pipe".
const gemvMixed = "mixed"

// gemvMixedDefault is whether FT_GEMV unset or empty runs gemvMixed (true)
// or the pipelined GEMVs everywhere (false, "pipe"). Measured on the H200
// (2026-12-02 00:52, bench/h200-s8d.sh, TestGEMVBalBench, µs per launch
// chained with dependent launch, Llama-3-8B): q/k/v gemv3 persist 14.59
// against pipe 18.54; o 10.22 vs 10.13; down 29.39 vs 28.64; gate·up
// 58.79 vs 58.07; LM head 241.7 vs 240.9, so the mix is the fastest per
// kernel. In the whole decode step (bench/h200-s8e.sh, 01:34 UTC) the gain
// is small but seen in every pair: graph step at 512 4.17 and 4.17 ms
// against 4.18, run-model 4.12 and 4.14 ms a token against 4.16, graph
// step at 8,192 4.53 against 4.56. Outputs are the same bits (gemv3_bf16
// and gemv3_pipe_bf16 are twins).
//
// With the early twins (gemvearly.go) and the early-copy attention the
// order turned (2026-12-03, bench/h200-s16c.sh, run-model 256 tokens,
// three pairs each): the pipelined q/k/v 3.93 ms a token three times
// against 3.96 three times (Llama-3-8B), 4.11 three times against
// 4.13-4.14 (Qwen3-8B). So the pipelined GEMVs run everywhere by default
// since s16; FT_GEMV=mixed gives the mix.
const gemvMixedDefault = false
