//go:build cuda

package cudabackend

// DecodeLayerOn reports whether DecodeLayer may run the one-kernel layer:
// DecodeMega on (FT_DECODE_MEGA=1). With it off the decoder skips building
// DecodeLayer's operands on every one-token layer.
func (b *Backend) DecodeLayerOn() bool { return b.DecodeMega }
