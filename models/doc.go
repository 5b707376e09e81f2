// Package models is the registry of model families. A family (models/llama,
// ...) registers the config.json "architectures" and "model_type" values it
// serves and how it builds a decoder.Model from that config; Load, New and
// LoadFromProfile pick the family by the checkpoint's config.json, and an
// unsupported one is an error listing the supported ones. Each family also
// names shapes for random-weight checkpoints (MakeCheckpoint). New and Load
// take the end-of-sequence tokens of generation_config.json too
// (ReadGenerationConfig). Import models/all to register every family (or a
// family's package for that one):
//
//	import _ "github.com/flextensor-go/flextensor/models/all"
//	m, ck, err := models.Load(dir, dev)
package models
