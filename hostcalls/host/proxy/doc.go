// Package proxy is the local HTTP proxy that puts a host.Host in front of
// an upstream, as Envoy's HTTP connection manager puts a Wasm filter in
// front of a cluster: New(h, upstream) is an http.Handler (make run,
// cmd/fairshare-run, and the plugin's end-to-end tests and benchmarks
// serve it with net/http).
//
// A request through it (one goroutine per request, plus one pumping the
// request body; the filter runs on the VM the Host picks):
//
//	client                 proxy (ServeHTTP)                 Host / VM              upstream
//	  |  POST /v1/x  body    |                                  |                      |
//	  |--------------------->| EnterServe, PickStream --------->| VM by Balance        |
//	  |                      | RequestHeaders ----------------->| on_request_headers   |
//	  |                      | Take: headers released? <--------|  (may stop, reply)   |
//	  |                      | client.Do(headers, pipe) ---------------------------->  |
//	  |  body, 32 KiB chunks | pumpRequest: RequestBody ------->| on_request_body      |
//	  |                      |   Take: data passed on --> pipe -------------------->   |
//	  |                      |   held? wait on Notify until a tick/queue/http_call     |
//	  |                      |   callback resumes (continue_stream) or replies         |
//	  |                      | ResponseHeaders <------------------------------------ 200
//	  |                      |                       --------->| on_response_headers  |
//	  |                      | ResponseBody per chunk -------->| on_response_body     |
//	  |  <---- flushed ------| Take: data passed on             |                      |
//	  |                      | Complete ----------------------->| on_log, on_done,     |
//	  |                      | ExitServe                        |   on_delete          |
//
// A local reply (proxy_send_local_response) ends the exchange with that
// reply and abandons the upstream request; a client that goes away resets
// the stream (on_log, on_done, on_delete still run) and cancels the
// upstream request; an upstream that cannot be reached becomes Envoy's
// 503 "upstream connect error", which goes through the response callbacks
// as the router's reply does. After Host.Close, new requests get 503
// "host closed" while those in flight finish.
//
// NewRouted adds a route table: a request goes to the upstream of the
// first route whose header matches the request headers as the filter
// released them (Envoy's route selection for a Wasm filter, route.go),
// else to the catch-all upstream.
//
// The proxy uses only the Host's exported API: EnterServe, ExitServe and
// PickStream (which also replaces a failed VM, as Envoy does for the next
// stream), and the Stream's event methods, Take and Notify.
package proxy
