package decoder

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/loader"
	"github.com/flextensor-go/flextensor/nn"
	"github.com/flextensor-go/flextensor/runtime"
)

// Quantization is a checkpoint's FP8 weight scheme, from config.json's
// quantization_config. Two layouts of the Hub are read:
//
//   - quant_method "compressed-tensors" with format "float-quantized": each
//     targeted Linear's weight is F8_E4M3 [out, in] with weight_scale
//     [out, 1] (weights strategy "channel"); "ignore" lists modules kept in
//     full precision (module names, or "re:" regular expressions);
//   - quant_method "fp8" (DeepSeek-V3, Qwen3 -FP8): weight F8_E4M3 with
//     weight_scale_inv F32 [⌈out/B⌉, ⌈in/B⌉] for weight_block_size [B, B];
//     lm_head and modules_to_not_convert stay in full precision.
//
// Activations are not quantized (W8A16): the input_activations /
// activation_scheme settings are read but not applied. The embedding, the
// norms and a tied head are never quantized.
type Quantization struct {
	Method    string            // "" (none), "compressed-tensors" or "fp8"
	Layout    kernels.FP8Layout // per channel (Block 0) or per block
	ScaleName string            // the scale parameter's local name: "weight_scale" or "weight_scale_inv"
	Ignore    []string          // modules left unquantized: names, or "re:" patterns
}

// Enabled reports whether the checkpoint's Linear weights are FP8.
func (q Quantization) Enabled() bool { return q.Method != "" }

// String describes the scheme ("fp8 per-channel (compressed-tensors)").
func (q Quantization) String() string {
	if !q.Enabled() {
		return "none"
	}
	return fmt.Sprintf("fp8 %v (%s)", q.Layout, q.Method)
}

// Quantizes reports whether the Linear with qualified name module holds an
// FP8 weight under q.
func (q Quantization) Quantizes(module string) bool {
	if !q.Enabled() {
		return false
	}
	if q.Method == "fp8" && (module == "lm_head" || strings.HasSuffix(module, ".lm_head")) {
		return false
	}
	for _, ig := range q.Ignore {
		if pat, ok := strings.CutPrefix(ig, "re:"); ok {
			if re, err := regexp.Compile("^(?:" + pat + ")"); err == nil && re.MatchString(module) {
				return false
			}
			continue
		}
		if module == ig || strings.HasSuffix(module, "."+ig) || (q.Method == "fp8" && strings.Contains(module, ig)) {
			return false
		}
	}
	return true
}

// ReadQuantization reads quantization_config (absent: no quantization).
// An unknown quant_method or format, a weight scheme other than 8-bit
// float E4M3 per channel or per square block, or a malformed field is an
// error naming the field. Errors are recorded in r.
func ReadQuantization(r *loader.Fields) Quantization {
	qc := r.Object("quantization_config")
	if qc == nil {
		return Quantization{}
	}
	var q Quantization
	defer func() { r.Fail(qc.Err()) }()
	method := qc.Str("quant_method", "")
	if qc.Err() != nil {
		return q
	}
	switch method {
	case "compressed-tensors":
		q = Quantization{Method: method, ScaleName: "weight_scale"}
		format := qc.Str("format", "")
		if qc.Err() == nil && format != "float-quantized" {
			qc.Fail(qc.Errorf("format", "%q is not supported (supported: float-quantized, 8-bit float weights)", format))
			return q
		}
		q.Ignore = readIgnore(qc, "ignore")
		groups := qc.Object("config_groups")
		if groups == nil {
			if qc.Err() == nil {
				qc.Fail(qc.Errorf("config_groups", "missing"))
			}
			return q
		}
		for _, name := range groups.Keys() {
			g := groups.Object(name)
			if g == nil {
				qc.Fail(groups.Err())
				if qc.Err() == nil {
					qc.Fail(groups.Errorf(name, "want an object"))
				}
				return q
			}
			readWeightScheme(g, qc)
			if qc.Err() != nil {
				return q
			}
		}
	case "fp8":
		q = Quantization{Method: method, ScaleName: "weight_scale_inv"}
		if f := qc.Str("fmt", "e4m3"); qc.Err() == nil && f != "e4m3" {
			qc.Fail(qc.Errorf("fmt", "%q is not supported (only e4m3)", f))
			return q
		}
		bs := qc.Ints("weight_block_size")
		switch {
		case qc.Err() != nil:
		case len(bs) == 0:
			qc.Fail(qc.Errorf("weight_block_size", "missing (per-tensor FP8 is not supported; want [B, B])"))
		case len(bs) != 2 || bs[0] != bs[1] || bs[0] <= 0:
			qc.Fail(qc.Errorf("weight_block_size", "%v is not supported (want square blocks [B, B], B > 0)", bs))
		default:
			q.Layout.Block = bs[0]
		}
		q.Ignore = readIgnore(qc, "modules_to_not_convert")
	case "":
		qc.Fail(qc.Errorf("quant_method", "missing"))
	default:
		qc.Fail(qc.Errorf("quant_method", "%q is not supported (supported: compressed-tensors with format float-quantized, fp8)", method))
	}
	return q
}

// readIgnore reads a list of module names and "re:" patterns, checking
// that the patterns compile.
func readIgnore(qc *loader.Fields, key string) []string {
	list := qc.Strings(key)
	for i, ig := range list {
		if pat, ok := strings.CutPrefix(ig, "re:"); ok {
			if _, err := regexp.Compile("^(?:" + pat + ")"); err != nil {
				qc.Fail(qc.Errorf(fmt.Sprintf("%s[%d]", key, i), "bad pattern %q: %v", pat, err))
				return nil
			}
		}
	}
	return list
}

// readWeightScheme checks one compressed-tensors config group: Linear
// targets, weights of 8-bit symmetric floats per channel. Errors go to qc.
func readWeightScheme(g, qc *loader.Fields) {
	for _, t := range g.Strings("targets") {
		if t != "Linear" {
			qc.Fail(g.Errorf("targets", "%q is not supported (only Linear)", t))
			return
		}
	}
	w := g.Object("weights")
	if w == nil {
		qc.Fail(g.Err())
		if qc.Err() == nil {
			qc.Fail(g.Errorf("weights", "missing"))
		}
		return
	}
	typ, bits, strategy := w.Str("type", ""), w.Int("num_bits", 0), w.Str("strategy", "")
	sym := w.Bool("symmetric", true)
	qc.Fail(w.Err())
	switch {
	case qc.Err() != nil:
	case typ != "float":
		qc.Fail(w.Errorf("type", "%q is not supported (only float: FP8 weights)", typ))
	case bits != 8:
		qc.Fail(w.Errorf("num_bits", "%d is not supported (only 8)", bits))
	case strategy != "channel":
		qc.Fail(w.Errorf("strategy", "%q is not supported (only channel: a scale per output row)", strategy))
	case !sym:
		qc.Fail(w.Errorf("symmetric", "false is not supported"))
	}
}

// quantize declares FP8 every Linear q quantizes (a tied head never is).
func (m *Model) quantize() error {
	q := m.Cfg.Quant
	if !q.Enabled() {
		return nil
	}
	for _, mod := range nn.Modules(m) {
		l, ok := mod.(*nn.Linear)
		if !ok || (m.Cfg.TieWordEmbeddings && l == m.Head) || !q.Quantizes(l.Node().Name()) {
			continue
		}
		if err := l.QuantizeFP8(q.ScaleName, q.Layout); err != nil {
			return err
		}
	}
	return nil
}

// checkDTypes checks, before anything is bound, that each parameter's
// checkpoint tensor has a dtype its module can take: F8_E4M3 for an FP8
// weight, F32, BF16 or F16 for its scales and for every other parameter.
// An FP8 tensor where the config implies none is an error naming the
// tensor and why.
func (m *Model) checkDTypes(info func(name string) (loader.TensorInfo, error), where string) error {
	fp8 := map[*nn.Parameter]bool{}
	for _, mod := range nn.Modules(m) {
		if l, ok := mod.(*nn.Linear); ok && l.Scale != nil {
			fp8[l.Weight] = true
		}
	}
	for _, p := range nn.Parameters(m) {
		t, err := info(p.Name())
		if err != nil {
			continue // reported by the binding, which names it
		}
		isF8 := t.DType == runtime.F8E4M3 || t.DType == runtime.F8E5M2
		switch {
		case fp8[p] && t.DType != runtime.F8E4M3:
			return fmt.Errorf("%s: tensor %s has dtype %v; quantization_config (%v) makes it an FP8 weight: want F8_E4M3", where, p.Name(), t.DType, m.Cfg.Quant)
		case !fp8[p] && isF8 && !m.Cfg.Quant.Enabled():
			return fmt.Errorf("%s: tensor %s has dtype %v but config.json has no quantization_config (FP8 weights need one: compressed-tensors float-quantized or fp8)", where, p.Name(), t.DType)
		case !fp8[p] && isF8:
			return fmt.Errorf("%s: tensor %s has dtype %v but quantization_config (%v) does not quantize it (ignored, or not a Linear weight)", where, p.Name(), t.DType, m.Cfg.Quant)
		case !fp8[p] && !SupportedWeightDType(t.DType):
			return fmt.Errorf("%s: tensor %s has dtype %v; the kernels take BF16, F16 or F32 weights and scales", where, p.Name(), t.DType)
		}
	}
	return nil
}

// The weight formats of a random checkpoint (WriteRandomCheckpoint, infer
// make-model --dtype).
const (
	FormatBF16       = "bf16"        // BF16 weights
	FormatFP8Channel = "fp8-channel" // compressed-tensors float-quantized, per-channel scales; lm_head BF16
	FormatFP8Block   = "fp8-block"   // quant_method fp8, 128×128 blocks; lm_head BF16
)

// Formats lists the random checkpoint formats.
var Formats = []string{FormatBF16, FormatFP8Channel, FormatFP8Block}

// QuantizationConfig is the config.json quantization_config of a format as
// the Hub writes it (nil for bf16); an unknown format is an error.
func QuantizationConfig(format string) (map[string]any, error) {
	switch format {
	case FormatBF16, "":
		return nil, nil
	case FormatFP8Channel:
		return map[string]any{
			"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
			"ignore": []string{"lm_head"},
			"config_groups": map[string]any{"group_0": map[string]any{
				"targets":           []string{"Linear"},
				"weights":           map[string]any{"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": true, "dynamic": false},
				"input_activations": map[string]any{"type": "float", "num_bits": 8, "strategy": "token", "symmetric": true, "dynamic": true},
			}},
		}, nil
	case FormatFP8Block:
		return map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{128, 128}}, nil
	}
	return nil, fmt.Errorf("weight format %q is unknown (known: %s)", format, strings.Join(Formats, ", "))
}
