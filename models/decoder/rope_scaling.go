package decoder

import (
	"math"

	"github.com/flextensor-go/flextensor/loader"
)

// ropeTypes are the rope_type values ReadRope accepts.
const ropeTypes = "default, linear, dynamic, yarn, llama3, longrope"

// readRopeScaling reads the settings of the rope types besides default and
// llama3 from sub (rope_scaling or rope_parameters) into rc, as
// transformers' _compute_*_parameters read them; top is the config's top
// level (max_position_embeddings, longrope's original_max_position_embeddings).
// It reports false for a type it does not know.
//
// YaRN and LongRoPE also scale the rotated q and k by an attention factor
// (by default 0.1·ln(factor)+1, and sqrt(1+ln(factor)/ln(original))): the
// decoder scales the rotated queries by its square (Attention.QScale),
// which gives the same scores. LongRoPE runs
// with its short factors, which transformers uses up to
// original_max_position_embeddings: that is then the model's context.
func readRopeScaling(top, sub *loader.Fields, rc *Rope) bool {
	positive := func(key string, v float64) {
		if sub.Err() == nil && (!(v > 0) || math.IsInf(v, 0)) {
			sub.Fail(sub.Errorf(key, "%s rope needs a positive number, got %v", rc.Type, v))
		}
	}
	maxPos := top.Positive("max_position_embeddings", 2048)
	switch rc.Type {
	case "linear", "dynamic":
		rc.Factor = sub.Float("factor", math.NaN())
		positive("factor", rc.Factor)
	case "yarn":
		rc.Factor = sub.Float("factor", math.NaN())
		positive("factor", rc.Factor)
		rc.OriginalMaxPositionEmbeddings = maxPos
		if sub.Present("original_max_position_embeddings") {
			// As transformers: the factor is then the ratio of the contexts.
			rc.OriginalMaxPositionEmbeddings = sub.Positive("original_max_position_embeddings", maxPos)
			rc.Factor = float64(maxPos) / float64(rc.OriginalMaxPositionEmbeddings)
		}
		rc.BetaFast = sub.Float("beta_fast", 32)
		rc.BetaSlow = sub.Float("beta_slow", 1)
		positive("beta_fast", rc.BetaFast)
		positive("beta_slow", rc.BetaSlow)
		rc.NoTruncate = !sub.Bool("truncate", true)
		mscale := func(scale, m float64) float64 {
			if scale <= 1 {
				return 1
			}
			return 0.1*m*math.Log(scale) + 1
		}
		rc.AttentionFactor = mscale(rc.Factor, 1)
		if m, all := sub.Float("mscale", 0), sub.Float("mscale_all_dim", 0); m != 0 && all != 0 {
			rc.AttentionFactor = mscale(rc.Factor, m) / mscale(rc.Factor, all)
		}
		rc.AttentionFactor = sub.Float("attention_factor", rc.AttentionFactor)
	case "longrope":
		rc.ShortFactor = sub.Floats("short_factor")
		sub.Floats("long_factor")
		orig := maxPos
		switch {
		case sub.Present("original_max_position_embeddings"):
			orig = sub.Positive("original_max_position_embeddings", maxPos)
		case top.Present("original_max_position_embeddings"):
			orig = top.Positive("original_max_position_embeddings", maxPos)
		}
		rc.OriginalMaxPositionEmbeddings = orig
		rc.Factor = float64(maxPos) / float64(orig)
		rc.AttentionFactor = 1
		if rc.Factor > 1 {
			rc.AttentionFactor = math.Sqrt(1 + math.Log(rc.Factor)/math.Log(float64(orig)))
		}
		rc.AttentionFactor = sub.Float("attention_factor", rc.AttentionFactor)
		if sub.Err() == nil && rc.ShortFactor == nil {
			sub.Fail(sub.Errorf("short_factor", "longrope needs a list of numbers"))
		}
	default:
		return false
	}
	if sub.Err() == nil && (rc.Type == "yarn" || rc.Type == "longrope") && (!(rc.AttentionFactor > 0) || math.IsInf(rc.AttentionFactor, 0)) {
		sub.Fail(sub.Errorf("attention_factor", "must be a positive number, got %v", rc.AttentionFactor))
	}
	return true
}
