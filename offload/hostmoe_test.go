package offload_test

import (
	"strings"
	"testing"

	"github.com/flextensor-go/flextensor/internal/devtest"
	"github.com/flextensor-go/flextensor/offload"
)

// TestHostUnitsWithExpertsRefusedAtOffload: units forced onto the host
// (Config.HostUnits) in a model whose MoE blocks announce their experts
// are refused by Offload, before any pass, with the plan's own error (the
// pool plan made after profiling refuses them), and a forced unit that is
// itself an expert with the error profiling would give; the same model
// with no forced unit offloads.
func TestHostUnitsWithExpertsRefusedAtOffload(t *testing.T) {
	for _, c := range []struct {
		name  string
		units []string
		want  string // "" offloads
	}{
		{"a dense unit", []string{"layers.1.attn"},
			`offload: plan: unit "layers.1.attn" is forced onto the host, but host placement does not combine with data-dependent (announced) units such as experts yet`},
		{"an expert", []string{"layers.0.moe.experts.3"},
			"HostUnits names layers.0.moe.experts.3, which cannot be computed on the host"},
		{"none", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := devtest.NewCPU(t)
			s := hostSwitch(t)
			for _, l := range s.Layers {
				l.MoE.announcer = true
			}
			cfg := offload.DefaultConfig(d.Dev)
			cfg.HostBackend = d.Backend
			cfg.HostUnits = c.units
			name := uniqueName(t)
			err := offload.Offload(s, &cfg, name)
			if err == nil {
				t.Cleanup(func() {
					if err := offload.Release(name, true); err != nil {
						t.Errorf("Release: %v", err)
					}
				})
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("Offload without forced host units: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Offload with HostUnits %q: %v; want an error saying %q", c.units, err, c.want)
			}
			if ph := offload.GetOffloadManager(name).Phase(); ph != offload.PhaseIdle {
				t.Errorf("after the refused Offload the manager is in %v; want idle", ph)
			}
		})
	}
}
