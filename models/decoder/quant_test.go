package decoder

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/loader"
)

func readQuant(t *testing.T, js string) (Quantization, error) {
	t.Helper()
	f, err := loader.ParseFields([]byte(js), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	q := ReadQuantization(f)
	return q, f.Err()
}

func TestReadQuantization(t *testing.T) {
	ct := `{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
		"ignore": ["lm_head", "re:.*layers\\.0\\.mlp\\..*"],
		"config_groups": {"g": {"targets": ["Linear"], "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": true}}}}}`
	q, err := readQuant(t, ct)
	if err != nil {
		t.Fatal(err)
	}
	if q.Method != "compressed-tensors" || q.Layout.Block != 0 || q.ScaleName != "weight_scale" {
		t.Errorf("got %+v", q)
	}
	for name, want := range map[string]bool{
		"lm_head": false, "model.layers.0.mlp.up_proj": false, "model.layers.1.mlp.up_proj": true,
		"model.layers.0.self_attn.q_proj": true, "model.layers.10.mlp.up_proj": true,
	} {
		if got := q.Quantizes(name); got != want {
			t.Errorf("Quantizes(%q) = %v, want %v", name, got, want)
		}
	}

	q, err = readQuant(t, `{"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "modules_to_not_convert": ["gate_proj"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	if q.Layout.Block != 128 || q.ScaleName != "weight_scale_inv" || q.String() != "fp8 block 128x128 (fp8)" {
		t.Errorf("got %+v (%v)", q, q)
	}
	if q.Quantizes("lm_head") || q.Quantizes("model.layers.3.mlp.gate_proj") || !q.Quantizes("model.layers.3.mlp.up_proj") {
		t.Errorf("fp8: lm_head %v, gate_proj %v, up_proj %v", q.Quantizes("lm_head"), q.Quantizes("model.layers.3.mlp.gate_proj"), q.Quantizes("model.layers.3.mlp.up_proj"))
	}

	if q, err := readQuant(t, `{"hidden_size": 4}`); err != nil || q.Enabled() || q.Quantizes("model.layers.0.mlp.up_proj") {
		t.Errorf("no quantization_config: %+v, %v", q, err)
	}

	for _, c := range []struct{ js, want string }{
		{`{"quantization_config": {"quant_method": "awq"}}`, `quantization_config.quant_method: "awq" is not supported`},
		{`{"quantization_config": {}}`, "quant_method: missing"},
		{`{"quantization_config": 3}`, "quantization_config: want an object"},
		{`{"quantization_config": {"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}}`, `fmt: "e5m2" is not supported`},
		{`{"quantization_config": {"quant_method": "fp8"}}`, "weight_block_size: missing"},
		{`{"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 0]}}`, "weight_block_size: [0 0] is not supported"},
		{`{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}}`, "config_groups: missing"},
		{`{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["re:("], "config_groups": {}}}`, "ignore[0]: bad pattern"},
		{`{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"weights": {"type": "int", "num_bits": 4, "strategy": "group"}}}}}`, `weights.type: "int" is not supported`},
		{`{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"weights": {"type": "float", "num_bits": 8, "strategy": "block"}}}}}`, `weights.strategy: "block" is not supported`},
		{`{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"targets": ["Embedding"], "weights": {}}}}}`, `targets: "Embedding" is not supported`},
	} {
		_, err := readQuant(t, c.js)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.js, err, c.want)
		}
	}
}
