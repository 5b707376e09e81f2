package decoder

import "fmt"

// OffloadUnits is the model's own offload units (offload.UnitSelector,
// used when the offload configuration gives no include). A dense model
// returns none: the engine's default makes each decoder layer a unit. A
// model with experts makes each layer's attention a unit, each expert of a
// sparse layer a unit of its own, and each dense layer's MLP a unit: a
// token reads only the experts it routes to, so only those need copying
// (the expert block announces them, which makes them the engine's
// data-dependent units, served by its expert cache). The norms and the
// routers stay resident with the embeddings and the head.
func (m *Model) OffloadUnits() (include, exclude []string) {
	if !m.Cfg.MoE.Enabled() {
		return nil, nil
	}
	n := m.Names
	include = []string{
		n.Layers + ".*." + n.Attn,
		n.Layers + ".*." + n.MoE.Block + "." + n.MoE.Experts + ".*",
	}
	for i := 0; i < m.Cfg.NumHiddenLayers; i++ {
		if !m.Cfg.MoE.Sparse(i) {
			include = append(include, fmt.Sprintf("%s.%d.%s", n.Layers, i, n.MLP))
		}
	}
	return include, nil
}
