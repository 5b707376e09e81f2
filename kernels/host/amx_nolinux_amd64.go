//go:build !linux

package host

// amxPermit: only Linux is asked for the tiles here.
func amxPermit() bool { return false }
