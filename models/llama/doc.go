// Package llama is the Llama family (LlamaForCausalLM, model_type "llama"):
// its config.json parsing (Config, ParseConfig), its tensor names (Names),
// test shapes and random checkpoints (Shapes, MakeCheckpoint), and its
// registration with models. The network itself is models/decoder's; Model,
// KVCache and the rest are aliases of its types, so Load, New and
// LoadFromProfile return a decoder.Model. Importing the package registers
// the family.
package llama
