// Package models is the registry of model families. A family (models/llama,
// ...) registers the config.json "architectures" and "model_type" values it
// serves and how it builds a decoder.Model from that config; Load, New and
// LoadFromProfile pick the family by the checkpoint's config.json, and an
// unsupported one is an error listing the supported ones. Import the
// families to register them:
//
//	import _ "github.com/flextensor-go/flextensor/models/llama"
//	m, ck, err := models.Load(dir, dev)
package models
