package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/loader"
)

// The fault tables: broken checkpoints, configs, tokenizers, profiles,
// flags and environment settings, each case asserting the exit code and
// the named cause (signals are in signals_test.go). No case may hang: each
// run is bounded.

// faultCase is one command with its expected exit code and message parts.
type faultCase struct {
	name string
	args []string
	env  map[string]string
	code int
	want []string
}

// runFaults runs each case in-process, within a time bound, and checks the
// exit code and that stderr holds every wanted part.
func runFaults(t *testing.T, cases []faultCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			type result struct {
				code        int
				out, errOut string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errOut := run(t, c.args...)
				done <- result{code, out, errOut}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("%v: no answer within 60 s (hangs)", c.args)
			}
			if r.code != c.code {
				t.Errorf("%v: exit %d, want %d; stderr %q", c.args, r.code, c.code, r.errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(r.errOut, w) {
					t.Errorf("%v: stderr %q lacks %q", c.args, r.errOut, w)
				}
			}
		})
	}
}

// tinyCopy copies the tiny checkpoint into a new directory.
func tinyCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		data, err := os.ReadFile(filepath.Join("../../testdata/tiny-llama", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// editConfig rewrites dir/config.json through edit.
func editConfig(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editTensors rewrites dir/model.safetensors through edit.
func editTensors(t *testing.T, dir string, edit func([]loader.NamedTensor) []loader.NamedTensor) {
	t.Helper()
	p := filepath.Join(dir, "model.safetensors")
	f, err := loader.OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var ts []loader.NamedTensor
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		b, err := f.Bytes(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, loader.NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), b...)})
	}
	f.Close()
	ts = edit(ts)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := loader.WriteFile(p, ts, nil); err != nil {
		t.Fatal(err)
	}
}

func tensorNamed(ts []loader.NamedTensor, name string) *loader.NamedTensor {
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	return nil
}

// withFile is a copy of the tiny checkpoint with file replaced by raw bytes.
func withFile(t *testing.T, file string, data []byte) string {
	dir := tinyCopy(t)
	if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withFIFO is a copy of the tiny checkpoint with file a named pipe.
func withFIFO(t *testing.T, file string) string {
	dir := tinyCopy(t)
	p := filepath.Join(dir, file)
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return dir
}

func rawHeader(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func TestCheckpointFaults(t *testing.T) {
	ids := []string{"--token-ids", "1,2,3", "--max-new-tokens", "2"}
	model := func(dir string) []string { return append([]string{"run-model", "--model", dir}, ids...) }

	extraLayer := tinyCopy(t)
	editTensors(t, extraLayer, func(ts []loader.NamedTensor) []loader.NamedTensor {
		for _, x := range ts {
			if strings.HasPrefix(x.Name, "model.layers.3.") {
				x.Name = strings.Replace(x.Name, "layers.3.", "layers.4.", 1)
				ts = append(ts, x)
			}
		}
		return ts
	})
	extraBias := tinyCopy(t)
	editTensors(t, extraBias, func(ts []loader.NamedTensor) []loader.NamedTensor {
		return append(ts, loader.NamedTensor{Name: "model.layers.0.self_attn.q_proj.bias", DType: ts[0].DType, Shape: []int{128}, Data: make([]byte, 128*ts[0].DType.Size())})
	})
	missing := tinyCopy(t)
	editTensors(t, missing, func(ts []loader.NamedTensor) []loader.NamedTensor {
		var out []loader.NamedTensor
		for _, x := range ts {
			if x.Name != "model.layers.1.mlp.up_proj.weight" {
				out = append(out, x)
			}
		}
		return out
	})
	nan := tinyCopy(t)
	editTensors(t, nan, func(ts []loader.NamedTensor) []loader.NamedTensor {
		w := tensorNamed(ts, "model.layers.2.mlp.down_proj.weight")
		binary.LittleEndian.PutUint16(w.Data[10:], 0x7FC0) // element 5: a BF16 NaN
		return ts
	})
	fewer := tinyCopy(t)
	editConfig(t, fewer, func(m map[string]any) { m["num_hidden_layers"] = 2 })
	huge := tinyCopy(t)
	editConfig(t, huge, func(m map[string]any) { m["num_hidden_layers"] = 2147483647 })
	dup := withFile(t, "model.safetensors", rawHeader(`{"model.norm.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"model.norm.weight":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)))
	null := withFile(t, "model.safetensors", rawHeader(`null`, nil))
	full, _ := os.ReadFile("../../testdata/tiny-llama/model.safetensors")
	truncated := withFile(t, "model.safetensors", full[:len(full)-100])
	dirAsFile := tinyCopy(t)
	os.Remove(filepath.Join(dirAsFile, "model.safetensors"))
	os.Mkdir(filepath.Join(dirAsFile, "model.safetensors"), 0o755)
	shardFIFO := tinyCopy(t)
	os.WriteFile(filepath.Join(shardFIFO, "model.safetensors.index.json"), []byte(`{"weight_map":{"model.norm.weight":"shard.safetensors"}}`), 0o644)
	if err := syscall.Mkfifo(filepath.Join(shardFIFO, "shard.safetensors"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}

	runFaults(t, []faultCase{
		{"weights a named pipe", model(withFIFO(t, "model.safetensors")), nil, 1, []string{"model.safetensors", "not a regular file (a named pipe)"}},
		{"shard a named pipe", model(shardFIFO), nil, 1, []string{"shard.safetensors", "not a regular file (a named pipe)"}},
		{"index a named pipe", model(withFIFO(t, "model.safetensors.index.json")), nil, 1, []string{"model.safetensors.index.json", "not a regular file (a named pipe)"}},
		{"weights a directory", model(dirAsFile), nil, 1, []string{"model.safetensors", "not a regular file (a directory)"}},
		{"an extra layer's tensors", model(extraLayer), nil, 1, []string{"num_hidden_layers is 4", "holds tensors for 5 layers"}},
		{"an extra bias", model(extraBias), nil, 1, []string{"1 tensor is not used by its config", "model.layers.0.self_attn.q_proj.bias"}},
		{"num_hidden_layers smaller", model(fewer), nil, 1, []string{"num_hidden_layers is 2", "4 layers: layers 2..3 would be ignored"}},
		{"num_hidden_layers 2147483647", model(huge), nil, 1, []string{"num_hidden_layers is 2147483647", "holds tensors for 4 layers"}},
		{"a tensor name twice in the header", model(dup), nil, 1, []string{"model.safetensors", `names tensor "model.norm.weight" twice`}},
		{"a null header", model(null), nil, 1, []string{"model.safetensors", "header is null, not a JSON object of tensors"}},
		{"a truncated file", model(truncated), nil, 1, []string{"model.safetensors", "truncated"}},
		{"a missing tensor", model(missing), nil, 1, []string{"missing: model.layers.1.mlp.up_proj.weight"}},
		{"a NaN weight", model(nan), nil, 1, []string{"the logits are not finite", "tensor model.layers.2.mlp.down_proj.weight holds a NaN or Inf (element 5)"}},
		{"no checkpoint", model(t.TempDir()), nil, 1, []string{"config.json"}},
		{"inspect: an extra layer", []string{"inspect", "--model", extraLayer}, nil, 1, []string{"holds tensors for 5 layers"}},
	})
}

func TestConfigFaults(t *testing.T) {
	cfg := func(edit func(m map[string]any)) string {
		dir := tinyCopy(t)
		editConfig(t, dir, edit)
		return dir
	}
	rope := func(p map[string]any) string {
		return cfg(func(m map[string]any) { delete(m, "rope_parameters"); m["rope_scaling"] = p })
	}
	long := longContextModel(t)
	gen := func(dir string, extra ...string) []string {
		return append([]string{"run-model", "--model", dir, "--token-ids", "1,2,3", "--max-new-tokens", "4"}, extra...)
	}
	runFaults(t, []faultCase{
		{"unknown rope_type", gen(rope(map[string]any{"rope_type": "su", "factor": 2})), nil, 1,
			[]string{"rope_scaling.rope_type", `"su" is not supported (supported: default, linear, dynamic, yarn, llama3, longrope)`}},
		{"non-numeric factor", gen(rope(map[string]any{"rope_type": "linear", "factor": "two"})), nil, 1,
			[]string{"rope_scaling.factor", `want a number, got "two"`}},
		{"linear without a factor", gen(rope(map[string]any{"rope_type": "linear"})), nil, 1, []string{"rope_scaling.factor", "linear rope needs a positive number"}},
		{"yarn with its default attention factor runs", gen(rope(map[string]any{"rope_type": "yarn", "factor": 4})), nil, 0, nil},
		{"yarn's attention factor not positive", gen(rope(map[string]any{"rope_type": "yarn", "factor": 4, "attention_factor": 0})), nil, 1,
			[]string{"rope_scaling.attention_factor", "must be a positive number"}},
		{"linear runs", gen(rope(map[string]any{"rope_type": "linear", "factor": 2})), nil, 0, nil},
		{"dynamic runs", gen(rope(map[string]any{"rope_type": "dynamic", "factor": 2})), nil, 0, nil},
		{"yarn with attention_factor 1 runs", gen(rope(map[string]any{"rope_type": "yarn", "factor": 4, "attention_factor": 1.0})), nil, 0, nil},
		{"longrope with attention_factor 1 runs", gen(rope(map[string]any{"rope_type": "longrope", "attention_factor": 1.0,
			"short_factor": []float64{1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8, 8.5}, "long_factor": []float64{1}})), nil, 0, nil},
		{"prompt + new tokens beyond the context", []string{"run-model", "--token-ids", "1,2,3", "--max-new-tokens", "254"}, nil, 2,
			[]string{"--token-ids gives 3 tokens and --max-new-tokens 254: 257 positions exceed the model's context of 256", "lower --max-new-tokens to 253"}},
		{"prompt text beyond the context", []string{"run-model", "--prompt", strings.Repeat("word ", 300), "--max-new-tokens", "1"}, nil, 2,
			[]string{"--prompt is", "exceed the model's context of 256", "shorten the prompt"}},
		{"--max-new-tokens 1000000000", []string{"run-model", "--token-ids", "1", "--max-new-tokens", "1000000000"}, nil, 2,
			[]string{"1000000001 positions exceed the model's context of 256"}},
		{"a KV cache larger than memory", []string{"run-model", "--model", long, "--token-ids", "1", "--max-new-tokens", "900000", "--device-memory", "64MiB"}, nil, 1,
			[]string{"a KV cache of 900001 positions needs", "more than the", "cpu has free", "out of memory"}},
		{"bench --context 100000000", []string{"bench", "--context", "100000000", "--budgets", "resident"}, nil, 2,
			[]string{"--context 100000000", "exceed the model's context of 256"}},
		{"bench --tokens beyond the context", []string{"bench", "--mode", "prefill", "--tokens", "1000", "--budgets", "resident"}, nil, 2,
			[]string{"--tokens 1000 exceeds the model's context of 256"}},
		{"profile --context 100000", []string{"profile", "--context", "100000", "--device-memory", "8MiB", "--gpu-budget", "0.5", "--out", t.TempDir()}, nil, 2,
			[]string{"--context 100000", "more than the model's context of 256", "give --context 252 or less"}},
		{"config.json a named pipe", gen(withFIFO(t, "config.json")), nil, 1, []string{"config.json", "not a regular file (a named pipe)"}},
		{"config.json null", gen(withFile(t, "config.json", []byte("null"))), nil, 1, []string{"config.json", "want a JSON object, got null"}},
		{"hidden_act gelu", gen(cfg(func(m map[string]any) { m["hidden_act"] = "gelu" })), nil, 1, []string{"hidden_act", `"gelu" is not supported`}},
		{"heads not divisible", gen(cfg(func(m map[string]any) { m["num_key_value_heads"] = 3 })), nil, 1, []string{"num_key_value_heads", "not divisible by num_key_value_heads 3"}},
		{"another architecture", gen(cfg(func(m map[string]any) { m["architectures"] = []string{"GPT2LMHeadModel"} })), nil, 1, []string{`"GPT2LMHeadModel"`, "not supported"}},
	})
}

func TestTokenizerAndProfileFaults(t *testing.T) {
	noTok := tinyCopy(t)
	os.Remove(filepath.Join(noTok, "tokenizer.json"))
	bigID := tinyCopy(t)
	data, _ := os.ReadFile(filepath.Join(bigID, "tokenizer.json"))
	var tok map[string]any
	if err := json.Unmarshal(data, &tok); err != nil {
		t.Fatal(err)
	}
	tok["model"].(map[string]any)["vocab"].(map[string]any)["!"] = 600 // a tokenizer of a larger vocabulary
	data, _ = json.Marshal(tok)
	os.WriteFile(filepath.Join(bigID, "tokenizer.json"), data, 0o644)

	profile := t.TempDir()
	if code, _, errOut := run(t, "profile", "--device-memory", "8MiB", "--gpu-budget", "0.5", "--context", "8", "--out", profile); code != 0 {
		t.Fatalf("profile: exit %d: %s", code, errOut)
	}
	garbled := t.TempDir()
	os.WriteFile(filepath.Join(garbled, "profile.json"), []byte("{not json"), 0o644)
	other := t.TempDir()
	if code, _, errOut := run(t, "make-model", "--shape", "deep-test", "--layers", "4", "--out", other); code != 0 {
		t.Fatalf("make-model: exit %d: %s", code, errOut)
	}
	ids := []string{"--token-ids", "1,2", "--max-new-tokens", "2"}
	withProfile := func(model, dir string, extra ...string) []string {
		args := append([]string{"run-model", "--device-memory", "8MiB", "--profile", dir}, ids...)
		if model != "" {
			args = append(args, "--model", model)
		}
		return append(args, extra...)
	}
	runFaults(t, []faultCase{
		{"--prompt without a tokenizer", []string{"run-model", "--model", noTok, "--prompt", "hi"}, nil, 1,
			[]string{"no tokenizer at " + filepath.Join(noTok, "tokenizer.json"), "--token-ids works without one"}},
		{"tokenizer.json garbled", []string{"run-model", "--model", withFile(t, "tokenizer.json", []byte("{oops")), "--prompt", "hi"}, nil, 1,
			[]string{"tokenizer.json"}},
		{"tokenizer.json a named pipe", []string{"run-model", "--model", withFIFO(t, "tokenizer.json"), "--prompt", "hi"}, nil, 1,
			[]string{"tokenizer.json", "not a regular file (a named pipe)"}},
		{"a tokenizer id outside the vocabulary", []string{"run-model", "--model", bigID, "--prompt", "!"}, nil, 1,
			[]string{"--prompt: the tokenizer", "gave id 600 at token", "outside the model's vocabulary [0, 512)", "does not match config.json's vocab_size"}},
		{"--token-ids empty", []string{"run-model", "--token-ids", ""}, nil, 2, []string{"--token-ids is empty"}},
		{"--token-ids outside the vocabulary", []string{"run-model", "--token-ids", "1,512"}, nil, 2, []string{"--token-ids: id 512 at position 1 is outside the vocabulary [0, 512)"}},
		{"tokenize: no such file", []string{"tokenize", "--tokenizer", "/nonexistent/tokenizer.json", "--text", "x"}, nil, 1, []string{"/nonexistent/tokenizer.json"}},
		{"the profile runs", withProfile("", profile), nil, 0, nil},
		{"no profile there", withProfile("", filepath.Join(profile, "absent")), nil, 1, []string{filepath.Join(profile, "absent")}},
		{"profile.json garbled", withProfile("", garbled), nil, 1, []string{"profile.json"}},
		{"a profile of another model", withProfile(other, profile), nil, 1, []string{"profile does not match the model", "model.embed_tokens.weight has shape [256 64] in the model, [512 128] in the profile"}},
		{"--profile with --gpu-budget", withProfile("", profile, "--gpu-budget", "1MiB"), nil, 2, []string{"--gpu-budget and --profile exclude each other"}},
		{"--profile with --transfer-blocks", withProfile("", profile, "--transfer-blocks", "3"), nil, 2, []string{"--transfer-blocks does not apply with --profile"}},
		{"--strict without --profile", []string{"run-model", "--token-ids", "1", "--strict"}, nil, 2, []string{"--strict applies with --profile only"}},
		{"profile without --out", []string{"profile", "--gpu-budget", "1MiB"}, nil, 2, []string{"--out is required"}},
		{"profile without --gpu-budget", []string{"profile", "--out", t.TempDir()}, nil, 2, []string{"--gpu-budget is required"}},
	})
}

func TestFlagAndEnvFaults(t *testing.T) {
	ids := []string{"run-model", "--token-ids", "1,2", "--max-new-tokens", "2"}
	with := func(extra ...string) []string { return append(append([]string{}, ids...), extra...) }
	seedCfg := filepath.Join(t.TempDir(), "seed.json")
	os.WriteFile(seedCfg, []byte(`{"seed": 1000000, "run-model": {"temperature": 0.9}}`), 0o644)
	existing := t.TempDir()
	os.WriteFile(filepath.Join(existing, "model-00001-of-00002.safetensors"), []byte("old"), 0o644)
	runFaults(t, []faultCase{
		{"--temperature Inf", with("--temperature", "Inf"), nil, 2, []string{"--temperature +Inf: want a finite number ≥ 0"}},
		{"--temperature NaN", with("--temperature", "NaN"), nil, 2, []string{"--temperature NaN"}},
		{"--temperature negative", with("--temperature", "-1"), nil, 2, []string{"--temperature -1"}},
		{"--top-p 0", with("--top-p", "0"), nil, 2, []string{"--top-p 0: want a number in (0, 1]", "1 keeps all tokens"}},
		{"--top-p 2", with("--top-p", "2"), nil, 2, []string{"--top-p 2"}},
		{"--top-k negative", with("--top-k", "-3"), nil, 2, []string{"--top-k -3"}},
		{"--gpu-budget 0 streams everything", with("--gpu-budget", "0", "--offload-timing", "--max-new-tokens", "8"), nil, 0, []string{"model.layers.3", "streamed"}},
		{"inspect --gpu-budget 0 streams everything", []string{"inspect", "--gpu-budget", "0"}, nil, 0, nil},
		{"a fraction without a device size", with("--gpu-budget", "0.5"), nil, 2, []string{"--gpu-budget 0.5 is a fraction of the device", "give --device-memory"}},
		{"inspect: a fraction without a device size", []string{"inspect", "--gpu-budget", "0.5"}, nil, 2, []string{"--gpu-budget 0.5 is a fraction of the device"}},
		{"--gpu-budget garbage", with("--gpu-budget", "lots"), nil, 2, []string{`--gpu-budget: memory budget "lots"`}},
		{"bench --gpu-budget", []string{"bench", "--gpu-budget", "1MiB"}, nil, 2, []string{"--gpu-budget and --profile do not apply"}},
		{"bench --profile", []string{"bench", "--profile", t.TempDir()}, nil, 2, []string{"--gpu-budget and --profile do not apply"}},
		{"bench --offload-timing", []string{"bench", "--offload-timing"}, nil, 2, []string{"--offload-timing does not apply to bench"}},
		{"bench --budgets garbage", []string{"bench", "--budgets", "0,lots"}, nil, 2, []string{`--budgets: memory budget "lots"`}},
		{"--transfer-blocks without a budget", with("--transfer-blocks", "3"), nil, 2, []string{"--transfer-blocks applies to an offloaded model only"}},
		{"--unit-graphs without a budget", with("--unit-graphs"), nil, 2, []string{"--unit-graphs applies to an offloaded model only"}},
		{"--offload-timing without a budget", with("--offload-timing"), nil, 2, []string{"--offload-timing applies to an offloaded model only"}},
		{"--strict without --profile", with("--strict"), nil, 2, []string{"--strict applies with --profile only"}},
		{"--max-new-tokens negative", with("--max-new-tokens", "-1"), nil, 2, []string{"--max-new-tokens -1 is negative"}},
		{"FT_PINNED=bogus", ids, map[string]string{"FT_PINNED": "bogus"}, 2, []string{`FT_PINNED="bogus": want one of "register", "alloc"`}},
		{"FT_TRACE=yes", ids, map[string]string{"FT_TRACE": "yes"}, 2, []string{`FT_TRACE="yes"`}},
		{"FT_HELP=true", ids, map[string]string{"FT_HELP": "true"}, 2, []string{"FT_HELP=true: help is not a setting"}},
		{"an unknown FT_ variable", ids, map[string]string{"FT_GPU_BUGDET": "1"}, 2, []string{"FT_GPU_BUGDET", "did you mean FT_GPU_BUDGET"}},
		{"FT_KERNEL_CACHE is known", ids, map[string]string{"FT_KERNEL_CACHE": "off"}, 0, nil},
		{"FT_TEMPERATURE=Inf", ids, map[string]string{"FT_TEMPERATURE": "Inf"}, 2, []string{"--temperature +Inf"}},
		{"a config seed of 1000000", with("--config", seedCfg), nil, 0, nil},
		{"make-model --out over a checkpoint", []string{"make-model", "--shape", "deep-test", "--out", existing}, nil, 2,
			[]string{"--out " + existing + " already holds 1 files", "--force"}},
		{"make-model --shard-bytes 0", []string{"make-model", "--shape", "deep-test", "--out", t.TempDir(), "--shard-bytes", "0"}, nil, 2,
			[]string{"--shard-bytes 0: want a positive number of bytes"}},
		{"make-model --shape unknown", []string{"make-model", "--shape", "gpt5", "--out", t.TempDir()}, nil, 2, []string{`--shape "gpt5": unknown`}},
		{"an unknown flag", with("--bogus"), nil, 2, []string{"unknown flag: --bogus"}},
		{"help of an unknown command", []string{"help", "frobnicate"}, nil, 2, []string{`unknown command "frobnicate"`}},
	})
	// The config's seed is 1000000 exactly (not 1e+06, which the flag refused).
	_, a, _ := run(t, with("--config", seedCfg, "--json", "--max-new-tokens", "8", "--ignore-eos")...)
	_, b, _ := run(t, with("--seed", "1000000", "--temperature", "0.9", "--json", "--max-new-tokens", "8", "--ignore-eos")...)
	ga, gb := generatedIDs(t, a), generatedIDs(t, b)
	if ga == "" || ga != gb {
		t.Errorf("config seed 1000000 gave %s, --seed 1000000 gave %s", ga, gb)
	}
	// make-model --force replaces the old checkpoint: no stale shard stays.
	if code, _, errOut := run(t, "make-model", "--shape", "deep-test", "--out", existing, "--force"); code != 0 {
		t.Fatalf("make-model --force: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(existing, "model-00001-of-00002.safetensors")); err == nil {
		t.Error("make-model --force left the stale shard model-00001-of-00002.safetensors")
	}
	if code, _, errOut := run(t, "run-model", "--model", existing, "--token-ids", "1,2", "--max-new-tokens", "2"); code != 0 {
		t.Errorf("the replaced checkpoint does not run: exit %d: %s", code, errOut)
	}
}

func generatedIDs(t *testing.T, out string) string {
	t.Helper()
	var v struct {
		G []int32 `json:"generated_ids"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %q", out)
	}
	return joinIDs(v.G)
}

// TestTempFiles: whatever way a command ends (success, a usage error, a
// runtime error, out of memory, help), the bundled model's temporary
// directory is gone and the bundled model is named as such, not by its
// temporary path.
func TestTempFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cases := []faultCase{
		{"run-model succeeds", []string{"run-model", "--token-ids", "1,2", "--max-new-tokens", "2"}, nil, 0, nil},
		{"run-model --prompt succeeds", []string{"run-model", "--prompt", "hi", "--max-new-tokens", "2"}, nil, 0, nil},
		{"bench succeeds", []string{"bench", "--budgets", "0,resident", "--iters", "1", "--warmup", "0", "--context", "4"}, nil, 0, nil},
		{"profile succeeds", []string{"profile", "--device-memory", "8MiB", "--gpu-budget", "0.5", "--context", "4", "--out", t.TempDir()}, nil, 0, nil},
		{"inspect succeeds", []string{"inspect"}, nil, 0, nil},
		{"tokenize succeeds", []string{"tokenize", "--text", "hi"}, nil, 0, nil},
		{"usage error", []string{"run-model", "--token-ids", "1,512"}, nil, 2, nil},
		{"out of memory", []string{"run-model", "--token-ids", "1,2", "--device-memory", "1KiB"}, nil, 1, []string{"out of memory"}},
		{"out of memory offloaded", []string{"run-model", "--token-ids", "1,2", "--device-memory", "64KiB", "--gpu-budget", "0"}, nil, 1, []string{"out of memory"}},
		{"a bad profile", []string{"run-model", "--token-ids", "1,2", "--profile", t.TempDir()}, nil, 1, []string{"profile.json"}},
	}
	runFaults(t, cases)
	if left := leftovers(t, tmp); len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
	// Messages name the bundled model, not its temporary directory.
	code, out, _ := run(t, "inspect")
	if code != 0 || !strings.Contains(out, "checkpoint  "+bundledName) || strings.Contains(out, tmp) {
		t.Errorf("inspect names the bundled model as %q", strings.SplitN(out, "\n", 2)[0])
	}
	code, out, _ = run(t, "bench", "--budgets", "resident", "--iters", "1", "--warmup", "0", "--context", "4")
	if code != 0 || !strings.HasPrefix(out, bundledName+" on cpu") {
		t.Errorf("bench names the bundled model as %q", strings.SplitN(out, "\n", 2)[0])
	}
	code, _, errOut := run(t, "run-model", "--token-ids", "1,2", "--device-memory", "1KiB")
	if code != 1 || strings.Contains(errOut, tmp) {
		t.Errorf("an error names the temporary directory: %q", errOut)
	}
}
