package offload

import "github.com/flextensor-go/flextensor/nn"

// UnitSelector is an optional interface of a model's root module: the
// offload units the model itself recommends, as include and exclude globs
// over qualified module names (Config.Include's syntax). The engine uses it
// when the configuration gives no Include (DefaultConfig gives none).
//
// A dense decoder needs none (the default, "model.layers.*", makes each
// layer a unit). A mixture-of-experts model implements it so that each
// expert is a unit of its own and the rest of a layer (attention) another:
// with a whole MoE layer as one unit, every expert would be copied every
// pass although a token reads a few. For example, for Mixtral:
//
//	include: model.layers.*.self_attn, model.layers.*.block_sparse_moe.experts.*
//
// The modules outside the units (norms, the router) stay resident. The
// experts' forward announces the ones it will call (nn.Announce), which
// makes them data-dependent units served by the expert cache (pool.go).
type UnitSelector interface {
	OffloadUnits() (include, exclude []string)
}

// DefaultInclude is the include pattern for a model that is not a
// UnitSelector (or one that returns no include): each decoder layer.
var DefaultInclude = []string{"model.layers.*"}

// ModelUnits is the include and exclude patterns the engine uses for model
// when the configuration gives no Include: the model's own (UnitSelector),
// else DefaultInclude.
func ModelUnits(model nn.Module) (include, exclude []string) {
	if s, ok := model.(UnitSelector); ok {
		if in, ex := s.OffloadUnits(); len(in) > 0 {
			return in, ex
		}
	}
	return append([]string(nil), DefaultInclude...), nil
}
