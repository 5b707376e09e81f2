package all_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models"
)

// TestGenerationConfig: generation_config.json's eos_token_id (an int or a
// list) joins the model's stop tokens, and do_sample sets the default
// sampling; absent means greedy; bad values name the field.
func TestGenerationConfig(t *testing.T) {
	const qwen3 = "../../testdata/tiny-qwen3"
	g, found, err := models.ReadGenerationConfig(qwen3)
	if err != nil || !found {
		t.Fatalf("fixture: %v, found %v", err, found)
	}
	if want := (models.GenerationConfig{EOSTokenIDs: []int{1}, BOSTokenID: 0}); !reflect.DeepEqual(g, want) {
		t.Errorf("fixture: %+v, want %+v", g, want)
	}
	if g, found, err := models.ReadGenerationConfig(t.TempDir()); err != nil || found || g.Sampling.Temperature != 0 || g.BOSTokenID != -1 {
		t.Errorf("no file: %+v, %v, %v; want greedy defaults", g, found, err)
	}
	withGen := func(t *testing.T, gen string) string {
		dir := checkpointWith(t, qwen3, qwen3)
		if err := os.WriteFile(filepath.Join(dir, models.GenerationConfigFileName), []byte(gen), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir := withGen(t, `{"eos_token_id": [7, 1, 9], "do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20}`)
	g, _, err = models.ReadGenerationConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := (kernels.SampleParams{Temperature: 0.7, TopK: 20, TopP: 0.8}); g.Sampling != want || !reflect.DeepEqual(g.EOSTokenIDs, []int{7, 1, 9}) {
		t.Errorf("got %+v, want sampling %+v and eos [7 1 9]", g, want)
	}
	m, err := models.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Cfg.EOSTokenIDs, []int{1, 7, 9}) {
		t.Errorf("model stop tokens %v, want config.json's [1] then generation_config's 7 and 9", m.Cfg.EOSTokenIDs)
	}
	g, _, _ = models.ReadGenerationConfig(withGen(t, `{"do_sample": true}`))
	if want := (kernels.SampleParams{Temperature: 1, TopK: 50, TopP: 1}); g.Sampling != want {
		t.Errorf("do_sample alone: %+v, want transformers' defaults %+v", g.Sampling, want)
	}
	for _, c := range []struct{ gen, want string }{
		{`{"do_sample": true, "top_p": 1.5}`, "field top_p"},
		{`{"eos_token_id": "x"}`, "field eos_token_id"},
		{`{"eos_token_id": [1, 100000]}`, "eos_token_id 100000 is not a token id"},
		{`{"do_sample": true, "top_k": -1}`, "field top_k"},
	} {
		_, err := models.New(withGen(t, c.gen))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "generation_config.json") {
			t.Errorf("%s: error %v, want one naming generation_config.json and %q", c.gen, err, c.want)
		}
	}
}
