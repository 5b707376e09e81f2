package models_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/llama"
	"github.com/flextensor-go/flextensor/runtime"
)

const tinyDir = "../testdata/tiny-llama"

// TestLoadByConfig: models.Load picks Llama by config.json and gives the
// model llama.Load gives.
func TestLoadByConfig(t *testing.T) {
	dev := runtime.NewCPU(0)
	defer dev.Close()
	b, _ := kernels.NewCPUBackend(dev)
	logits := func(load func(string, runtime.Device) (*llama.Model, error)) []float32 {
		m, err := load(tinyDir, dev)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		cache, _ := m.NewKVCache(b, 4)
		defer cache.Free()
		lt, err := m.Forward(b, cache, []int32{1, 2, 3}, false)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, lt.NumElements())
		b.ReadF32(v, lt)
		return v
	}
	byRegistry := logits(func(dir string, dev runtime.Device) (*llama.Model, error) {
		m, ck, err := models.Load(dir, dev)
		if err == nil {
			t.Cleanup(func() { ck.Close() })
		}
		return m, err
	})
	direct := logits(func(dir string, dev runtime.Device) (*llama.Model, error) {
		m, ck, err := llama.Load(dir, dev)
		if err == nil {
			t.Cleanup(func() { ck.Close() })
		}
		return m, err
	})
	if !slices.Equal(byRegistry, direct) {
		t.Fatal("models.Load and llama.Load give different models")
	}
}

func TestLookup(t *testing.T) {
	for _, c := range []struct {
		config string
		ok     bool
		want   []string
	}{
		{`{"architectures":["LlamaForCausalLM"]}`, true, nil},
		{`{"model_type":"llama"}`, true, nil},
		{`{"architectures":["Foo","LlamaForCausalLM"],"model_type":"foo"}`, true, nil},
		{`{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3"}`, false,
			[]string{"c.json", `architectures ["Qwen3ForCausalLM"]`, "not supported", "supported: LlamaForCausalLM (model_type llama)"}},
		{`{"model_type":"gpt2"}`, false, []string{`model_type "gpt2"`, "LlamaForCausalLM"}},
		{`{"architectures":"LlamaForCausalLM"}`, false, []string{"field architectures", "want a list of strings"}},
		{`[`, false, []string{"c.json", "invalid JSON"}},
	} {
		f, err := models.Lookup([]byte(c.config), "c.json")
		if c.ok {
			if err != nil || f.Name != "llama" {
				t.Errorf("%s: family %q, %v; want llama", c.config, f.Name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: found family %q", c.config, f.Name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.config, err, w)
			}
		}
	}
}

// TestUnsupportedDir: a checkpoint of an unregistered family is refused
// before any weight is read, naming the supported ones.
func TestUnsupportedDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["MixtralForCausalLM"],"model_type":"mixtral"}`), 0o644)
	_, _, err := models.Load(dir, runtime.NewMeta())
	if err == nil || !strings.Contains(err.Error(), "MixtralForCausalLM") || !strings.Contains(err.Error(), "LlamaForCausalLM") {
		t.Fatalf("error %v", err)
	}
	if _, err := models.New(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("no config.json: %v", err)
	}
}

func TestRegisterConflict(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering a second family for LlamaForCausalLM did not panic")
		}
	}()
	models.Register(models.Family{Name: "other", Architectures: []string{"LlamaForCausalLM"}, New: llama.Family.New})
}

// TestRegisterSameClaimsKeepsFirst: registering a family's name again with
// the same claims does nothing, even with another New: the first family
// stays (llama.Register may run after its init).
func TestRegisterSameClaimsKeepsFirst(t *testing.T) {
	again := llama.Family
	again.New = func([]byte, string) (*decoder.Model, error) {
		return nil, errors.New("the second registration's New ran")
	}
	models.Register(again)
	llama.Register()
	m, err := models.New(tinyDir)
	if err != nil {
		t.Fatalf("after registering llama again: %v", err)
	}
	m.Close()
}

// TestLoadNilDevice: models.Load with a nil device is an error, not a panic.
func TestLoadNilDevice(t *testing.T) {
	m, ck, err := models.Load(tinyDir, nil)
	if err == nil || !strings.Contains(err.Error(), "nil device") {
		t.Errorf("models.Load(dir, nil): %v", err)
	}
	if m != nil || ck != nil {
		t.Errorf("models.Load(dir, nil) returned a model or checkpoint")
	}
}
