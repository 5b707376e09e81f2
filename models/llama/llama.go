package llama

import (
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
)

// Names is Llama's tensor-name table (transformers' LlamaForCausalLM):
// model.embed_tokens, model.layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm,
// mlp.{gate,up,down}_proj}, model.norm, lm_head.
var Names = decoder.Names{
	Embed: "model.embed_tokens", Layers: "model.layers", Norm: "model.norm", Head: "lm_head",
	InputNorm: "input_layernorm", Attn: "self_attn", PostNorm: "post_attention_layernorm", MLP: "mlp",
	Q: "q_proj", K: "k_proj", V: "v_proj", O: "o_proj",
	Gate: "gate_proj", Up: "up_proj", Down: "down_proj",
}

// The shared decoder's types, under the names Llama callers know.
type (
	// Model is LlamaForCausalLM: a decoder.Model with Llama's names.
	Model = decoder.Model
	// Layer is one decoder layer.
	Layer = decoder.Layer
	// KVCache is the contiguous KV cache.
	KVCache = decoder.KVCache
	// DecodeGraph is a captured one-token step.
	DecodeGraph = decoder.DecodeGraph
	// GenerateOptions steer Model.Generate.
	GenerateOptions = decoder.GenerateOptions
)

// UnitGraphs is decoder.UnitGraphs: per-layer graphs for the offload engine.
var UnitGraphs = decoder.UnitGraphs

// Family registers Llama with the models registry.
var Family = models.DecoderFamily(Spec, decoderShapes())

// Register adds Llama to the models registry. Importing the package does it.
func Register() { models.Register(Family) }

func init() { Register() }

// New builds the module tree for cfg with no weights bound, named as in the
// checkpoint (Names). With tied embeddings, lm_head shares embed_tokens'
// weight.
func New(cfg *Config) (*Model, error) { return Spec.New(cfg) }

// build is the Llama model of the checkpoint in dir, with no weights bound.
func build(dir string) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// Load reads config.json and the safetensors weights of the checkpoint in dir
// and binds them on dev. On the CPU the weights stay in the mmapped files
// (zero copy); elsewhere they are uploaded. Close the model, then the
// checkpoint, when done.
func Load(dir string, dev runtime.Device) (*Model, *loader.Checkpoint, error) {
	return decoder.Builder(build).Load(dir, dev)
}

// LoadFromProfile builds the Llama model of the checkpoint in dir and hands
// its weights to the offload engine with the profile st (see
// decoder.LoadFromProfile).
func LoadFromProfile(dir string, st *offload.State, cfg offload.Config, name string, strict bool, opts ...offload.Option) (*Model, *loader.Checkpoint, error) {
	return decoder.Builder(build).LoadFromProfile(dir, st, cfg, name, strict, opts...)
}
