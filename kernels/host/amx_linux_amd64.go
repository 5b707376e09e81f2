package host

import "syscall"

// Linux's arch_prctl request for the AMX tile data state: a process asks
// once, and without it the first tile instruction faults.
const (
	archReqXcompPerm = 0x1023
	xfeatureTileData = 18
)

// amxPermit asks Linux to let this process use the AMX tiles.
func amxPermit() bool {
	_, _, errno := syscall.Syscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureTileData, 0)
	return errno == 0
}
