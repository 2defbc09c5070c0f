//go:build wasip1

package main

// The exports of the module (see the package documentation).

//go:wasmexport prepare
func wasmPrepare(teams int32) int32 { return int32(prepare(int(teams))) }

//go:wasmexport acquire
func wasmAcquire(n, within int32) int64 { return acquireLoop(int(n), within != 0) }

//go:wasmexport release
func wasmRelease(n int32) int64 { return releaseLoop(int(n)) }

//go:wasmexport codec
func wasmCodec(n int32) int64 { return codecLoop(int(n)) }

//go:wasmexport own
func wasmOwn(n int32) int64 { return ownLoop(int(n)) }

//go:wasmexport arrive
func wasmArrive(n int32) int64 { return arriveLoop(int(n)) }

//go:wasmexport dispatch
func wasmDispatch(n int32) int64 { return dispatchLoop(int(n)) }

//go:wasmexport floorbytes
func wasmFloorBytes(n int32) int64 { return floorBytes(int(n)) }

//go:wasmexport floorvarint
func wasmFloorVarint(n int32) int64 { return floorVarint(int(n)) }

//go:wasmexport floorfloat
func wasmFloorFloat(n int32) int64 { return floorFloat(int(n)) }
