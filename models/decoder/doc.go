// Package decoder is what every decoder-only transformer shares: a Config of
// the generic knobs (sizes, heads, RoPE, eps, tied embeddings, and the
// extension points the next families fill in), the module tree built from a
// family's tensor-name table (Names), Attention / MLP / Layer / Model with
// their forwards, the KV cache behind the Cache interface the attention
// calls, generation, CUDA-graph capture (DecodeGraph for a resident model,
// UnitGraphs per layer under the offload engine), per-module fusion, and
// binding weights from a checkpoint. A family (models/llama) is a config
// parser, a Names table and a registration.
//
// A Model may be called from several goroutines but runs one forward at a
// time (its forward lock; see Model): concurrent Generate calls interleave
// their steps and each gives what it gives alone. Use
// models/generate.Scheduler to serve many requests in one batched forward.
// KV caches made on a model (NewKVCache, NewPagedCache) are the caller's to
// free before the model's session closes.
//
// Dimension letters: T tokens in a forward, D hidden size, H query heads, K
// key/value heads, d head width, I MLP inner width, V vocabulary, C cache
// capacity.
package decoder
