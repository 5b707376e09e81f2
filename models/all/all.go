// Package all imports every model family so that each registers with the
// models registry. Import it where models.Load, models.New or
// models.MakeCheckpoint should know them all:
//
//	import _ "github.com/flextensor-go/flextensor/models/all"
//
// A new family is one more import here.
package all

import (
	_ "github.com/flextensor-go/flextensor/models/llama"    // LlamaForCausalLM
	_ "github.com/flextensor-go/flextensor/models/mistral"  // MistralForCausalLM
	_ "github.com/flextensor-go/flextensor/models/mixtral"  // MixtralForCausalLM
	_ "github.com/flextensor-go/flextensor/models/qwen2"    // Qwen2ForCausalLM
	_ "github.com/flextensor-go/flextensor/models/qwen3"    // Qwen3ForCausalLM
	_ "github.com/flextensor-go/flextensor/models/qwen3moe" // Qwen3MoeForCausalLM
)
