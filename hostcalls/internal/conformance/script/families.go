package script

import (
	"fmt"
	"runtime"

	"github.com/fairshare-wasm/fairshare/hostcalls"
)

// Names accepted in Step.Level, Step.Buffer, Step.Map, Step.Stream and
// Step.Metric.
var (
	levels = map[string]hostcalls.LogLevel{
		"trace": hostcalls.LogLevelTrace, "debug": hostcalls.LogLevelDebug, "info": hostcalls.LogLevelInfo,
		"warn": hostcalls.LogLevelWarn, "error": hostcalls.LogLevelError, "critical": hostcalls.LogLevelCritical,
	}
	buffers = map[string]hostcalls.BufferType{
		"request_body": hostcalls.BufferHTTPRequestBody, "response_body": hostcalls.BufferHTTPResponseBody,
		"http_call_response_body": hostcalls.BufferHTTPCallResponseBody,
		"vm_configuration":        hostcalls.BufferVMConfiguration, "plugin_configuration": hostcalls.BufferPluginConfiguration,
	}
	mapTypes = map[string]hostcalls.MapType{
		"request_headers": hostcalls.MapHTTPRequestHeaders, "request_trailers": hostcalls.MapHTTPRequestTrailers,
		"response_headers": hostcalls.MapHTTPResponseHeaders, "response_trailers": hostcalls.MapHTTPResponseTrailers,
		"http_call_response_headers":  hostcalls.MapHTTPCallResponseHeaders,
		"http_call_response_trailers": hostcalls.MapHTTPCallResponseTrailers,
	}
	streams = map[string]hostcalls.StreamType{
		"request": hostcalls.StreamHTTPRequest, "response": hostcalls.StreamHTTPResponse,
		"downstream": hostcalls.StreamDownstream, "upstream": hostcalls.StreamUpstream,
	}
	metricTypes = map[string]hostcalls.MetricType{
		"counter": hostcalls.MetricCounter, "gauge": hostcalls.MetricGauge, "histogram": hostcalls.MetricHistogram,
	}
)

// badName is the error of a step that names an unknown level, buffer, map,
// stream or metric type: no host call is made and the step logs
// status=BAD_ARGUMENT.
func badName(kind, name string) error {
	return fmt.Errorf("unknown %s %q: %w", kind, name, hostcalls.StatusBadArgument.Err())
}

// Log is the family of proxy_log: "log".
func Log() Family {
	return Family{"log": func(_ *Env, s Step) (string, string, error) {
		args := fmt.Sprintf("level=%s msg=%s", s.Level, q(s.Msg))
		lv, ok := levels[s.Level]
		if !ok {
			return args, "", badName("level", s.Level)
		}
		return args, "", hostcalls.Log(lv, s.Msg)
	}}
}

// LogLevel is the family of proxy_get_log_level: "get_log_level".
func LogLevel() Family {
	return Family{"get_log_level": func(_ *Env, s Step) (string, string, error) {
		lv, err := hostcalls.GetLogLevel()
		return "", fmt.Sprintf("level=%d", lv), err
	}}
}

// Tick is the family of proxy_set_tick_period_milliseconds:
// "set_tick_period_milliseconds".
func Tick() Family {
	return Family{"set_tick_period_milliseconds": func(_ *Env, s Step) (string, string, error) {
		return fmt.Sprintf("ms=%d", s.N), "", hostcalls.SetTickPeriodMilliSeconds(uint32(s.N))
	}}
}

// Buffer is the family of proxy_get_buffer_bytes and proxy_set_buffer_bytes.
func Buffer() Family {
	return Family{
		"get_buffer_bytes": func(_ *Env, s Step) (string, string, error) {
			args := fmt.Sprintf("buffer=%s start=%d max=%s", s.Buffer, s.Start, maxArg(s))
			bt, ok := buffers[s.Buffer]
			if !ok {
				return args, "", badName("buffer", s.Buffer)
			}
			b, err := hostcalls.GetBufferBytes(bt, s.Start, maxOf(s))
			return args, bytesResult(s, "bytes", b), err
		},
		"set_buffer_bytes": func(_ *Env, s Step) (string, string, error) {
			args := fmt.Sprintf("buffer=%s start=%d size=%d %s", s.Buffer, s.Start, s.Size, s.valueArg())
			bt, ok := buffers[s.Buffer]
			if !ok {
				return args, "", badName("buffer", s.Buffer)
			}
			return args, "", hostcalls.SetBufferBytes(bt, s.Start, s.Size, hold([]byte(s.value())))
		},
	}
}

// BufferStatus is the family of proxy_get_buffer_status: "get_buffer_status".
func BufferStatus() Family {
	return Family{"get_buffer_status": func(_ *Env, s Step) (string, string, error) {
		args := "buffer=" + s.Buffer
		bt, ok := buffers[s.Buffer]
		if !ok {
			return args, "", badName("buffer", s.Buffer)
		}
		size, flags, err := hostcalls.GetBufferStatus(bt)
		return args, fmt.Sprintf("size=%d flags=%d", size, flags), err
	}}
}

// Headers is the family of the header-map functions but
// proxy_get_header_map_size.
func Headers() Family {
	withMap := func(f func(mt hostcalls.MapType, s Step) (string, error), fmtArgs func(s Step) string) Call {
		return func(_ *Env, s Step) (string, string, error) {
			args := "map=" + s.Map
			if extra := fmtArgs(s); extra != "" {
				args += " " + extra
			}
			mt, ok := mapTypes[s.Map]
			if !ok {
				return args, "", badName("map", s.Map)
			}
			res, err := f(mt, s)
			return args, res, err
		}
	}
	none := func(Step) string { return "" }
	key := func(s Step) string { return "key=" + q(s.Key) }
	keyValue := func(s Step) string { return fmt.Sprintf("key=%s value=%s", q(s.Key), q(s.Value)) }
	return Family{
		"get_header_map_pairs": withMap(func(mt hostcalls.MapType, s Step) (string, error) {
			p, err := hostcalls.GetHeaderMapPairs(mt)
			return "pairs=" + pairsJSON(p), err
		}, none),
		"set_header_map_pairs": withMap(func(mt hostcalls.MapType, s Step) (string, error) {
			return "", hostcalls.SetHeaderMapPairs(mt, s.Pairs)
		}, func(s Step) string { return "pairs=" + pairsJSON(s.Pairs) }),
		"get_header_map_value": withMap(func(mt hostcalls.MapType, s Step) (string, error) {
			v, err := hostcalls.GetHeaderMapValue(mt, s.Key)
			return "value=" + q(v), err
		}, key),
		"add_header_map_value": withMap(func(mt hostcalls.MapType, s Step) (string, error) {
			return "", hostcalls.AddHeaderMapValue(mt, s.Key, s.Value)
		}, keyValue),
		"replace_header_map_value": withMap(func(mt hostcalls.MapType, s Step) (string, error) {
			return "", hostcalls.ReplaceHeaderMapValue(mt, s.Key, s.Value)
		}, keyValue),
		"remove_header_map_value": withMap(func(mt hostcalls.MapType, s Step) (string, error) {
			return "", hostcalls.RemoveHeaderMapValue(mt, s.Key)
		}, key),
	}
}

// HeaderMapSize is the family of proxy_get_header_map_size:
// "get_header_map_size".
func HeaderMapSize() Family {
	return Family{"get_header_map_size": func(_ *Env, s Step) (string, string, error) {
		args := "map=" + s.Map
		mt, ok := mapTypes[s.Map]
		if !ok {
			return args, "", badName("map", s.Map)
		}
		n, err := hostcalls.GetHeaderMapSize(mt)
		return args, fmt.Sprintf("size=%d", n), err
	}}
}

// Stream is the family of proxy_continue_stream, proxy_close_stream,
// proxy_set_effective_context and proxy_done.
func Stream() Family {
	stream := func(f func(hostcalls.StreamType) error) Call {
		return func(_ *Env, s Step) (string, string, error) {
			args := "stream=" + s.Stream
			st, ok := streams[s.Stream]
			if !ok {
				return args, "", badName("stream", s.Stream)
			}
			return args, "", f(st)
		}
	}
	return Family{
		"continue_stream": stream(hostcalls.ContinueStream),
		"close_stream":    stream(hostcalls.CloseStream),
		"set_effective_context": func(e *Env, s Step) (string, string, error) {
			id := s.Ctx
			if id == 0 {
				id = e.callerCtx
			}
			return fmt.Sprintf("ctx=%d", id), "", hostcalls.SetEffectiveContext(id)
		},
		"done": func(_ *Env, s Step) (string, string, error) {
			return "", "", hostcalls.PluginDone()
		},
	}
}

// LocalResponse is the family of proxy_send_local_response:
// "send_local_response".
func LocalResponse() Family {
	return Family{"send_local_response": func(_ *Env, s Step) (string, string, error) {
		grpc := int32(-1)
		if s.GRPC != nil {
			grpc = *s.GRPC
		}
		args := fmt.Sprintf("status=%d details=%s body=%s headers=%s grpc=%d",
			s.Status, q(s.Details), q(s.Body), pairsJSON(s.Pairs), grpc)
		return args, "", hostcalls.SendHttpResponseWithDetails(s.Status, s.Details, s.Pairs, hold([]byte(s.Body)), grpc)
	}}
}

// HTTPCall is the family of proxy_http_call: "http_call". Its response runs
// the script's http_call_response steps after logging
// on_http_call_response(ctx=<root> token=T headers=H body=B trailers=N).
func HTTPCall() Family {
	return Family{"http_call": func(e *Env, s Step) (string, string, error) {
		args := fmt.Sprintf("upstream=%s headers=%s body=%s trailers=%s timeout=%d",
			q(s.Upstream), pairsJSON(s.Pairs), q(s.Body), pairsJSON(s.Trailers), s.Timeout)
		caller := hostcalls.CurrentContextID()
		script := e.script
		var token uint32
		token, err := hostcalls.DispatchHttpCall(s.Upstream, s.Pairs, []byte(s.Body), s.Trailers, s.Timeout,
			func(numHeaders, bodySize, numTrailers int) {
				e.callerCtx = caller
				e.run(script, OnHTTPCallResponse, fmt.Sprintf(
					"on_http_call_response(ctx=%d token=%d headers=%d body=%d trailers=%d)",
					hostcalls.CurrentContextID(), token, numHeaders, bodySize, numTrailers))
			})
		e.callerCtx = caller
		return args, fmt.Sprintf("token=%d", token), err
	}}
}

// Status is the family of proxy_get_status: "get_status".
func Status() Family {
	return Family{"get_status": func(_ *Env, s Step) (string, string, error) {
		code, msg, err := hostcalls.GetStatus()
		return "", fmt.Sprintf("code=%d msg=%s", code, qb(msg)), err
	}}
}

// SharedData is the family of proxy_get_shared_data and
// proxy_set_shared_data.
func SharedData() Family {
	return Family{
		"get_shared_data": func(_ *Env, s Step) (string, string, error) {
			v, cas, err := hostcalls.GetSharedData(s.Key)
			return "key=" + q(s.Key), fmt.Sprintf("%s cas=%d", bytesResult(s, "value", v), cas), err
		},
		"set_shared_data": func(_ *Env, s Step) (string, string, error) {
			return fmt.Sprintf("key=%s %s cas=%d", q(s.Key), s.valueArg(), s.CAS), "",
				hostcalls.SetSharedData(s.Key, []byte(s.value()), s.CAS)
		},
	}
}

// queueID is the queue a step names: ID if set, else the id remembered for
// Name, else the last registered or resolved queue.
func (e *Env) queueID(s Step) uint32 {
	if s.ID != nil {
		return *s.ID
	}
	if id, ok := e.queues[s.Name]; ok && s.Name != "" {
		return id
	}
	return e.lastQueue
}

// Queue is the family of the shared-queue functions.
func Queue() Family {
	return Family{
		"register_shared_queue": func(e *Env, s Step) (string, string, error) {
			id, err := hostcalls.RegisterSharedQueue(s.Name)
			if err == nil {
				e.queues[s.Name], e.lastQueue = id, id
			}
			return "name=" + q(s.Name), fmt.Sprintf("id=%d", id), err
		},
		"resolve_shared_queue": func(e *Env, s Step) (string, string, error) {
			id, err := hostcalls.ResolveSharedQueue(s.VMID, s.Name)
			if err == nil {
				e.queues[s.Name], e.lastQueue = id, id
			}
			return fmt.Sprintf("vm_id=%s name=%s", q(s.VMID), q(s.Name)), fmt.Sprintf("id=%d", id), err
		},
		"enqueue_shared_queue": func(e *Env, s Step) (string, string, error) {
			id := e.queueID(s)
			return fmt.Sprintf("id=%d %s", id, s.valueArg()), "", hostcalls.EnqueueSharedQueue(id, hold([]byte(s.value())))
		},
		"dequeue_shared_queue": func(e *Env, s Step) (string, string, error) {
			id := e.queueID(s)
			v, err := hostcalls.DequeueSharedQueue(id)
			return fmt.Sprintf("id=%d", id), bytesResult(s, "value", v), err
		},
	}
}

// metricID is the metric a step names: ID if set, else the id remembered
// for Name.
func (e *Env) metricID(s Step) uint32 {
	if s.ID != nil {
		return *s.ID
	}
	return e.metrics[s.Name]
}

// Metrics is the family of the metric functions.
func Metrics() Family {
	return Family{
		"define_metric": func(e *Env, s Step) (string, string, error) {
			args := fmt.Sprintf("metric=%s name=%s", s.Metric, q(s.Name))
			mt, ok := metricTypes[s.Metric]
			if !ok {
				return args, "", badName("metric", s.Metric)
			}
			id, err := hostcalls.DefineMetric(mt, s.Name)
			if err == nil {
				e.metrics[s.Name] = id
			}
			return args, fmt.Sprintf("id=%d", id), err
		},
		"increment_metric": func(e *Env, s Step) (string, string, error) {
			id := e.metricID(s)
			return fmt.Sprintf("id=%d delta=%d", id, s.N), "", hostcalls.IncrementMetric(id, s.N)
		},
		"record_metric": func(e *Env, s Step) (string, string, error) {
			id := e.metricID(s)
			return fmt.Sprintf("id=%d value=%d", id, s.N), "", hostcalls.RecordMetric(id, uint64(s.N))
		},
		"get_metric": func(e *Env, s Step) (string, string, error) {
			id := e.metricID(s)
			v, err := hostcalls.GetMetric(id)
			return fmt.Sprintf("id=%d", id), fmt.Sprintf("value=%d", v), err
		},
	}
}

// Properties is the family of proxy_get_property and proxy_set_property.
func Properties() Family {
	return Family{
		"get_property": func(_ *Env, s Step) (string, string, error) {
			v, err := hostcalls.GetProperty(s.Path)
			return "path=" + pathArg(s.Path), bytesResult(s, "value", v), err
		},
		"set_property": func(_ *Env, s Step) (string, string, error) {
			return fmt.Sprintf("path=%s value=%s", pathArg(s.Path), q(s.Value)), "",
				hostcalls.SetProperty(s.Path, hold([]byte(s.Value)))
		},
	}
}

// Runtime is the family of guest-only steps: "gc" runs runtime.GC() N times
// (at least once), which makes the Go runtime call WASI poll_oneoff once
// its poller is set up (the legacy-WASI crash: golang/go#78513).
func Runtime() Family {
	return Family{"gc": func(_ *Env, s Step) (string, string, error) {
		n := s.N
		if n < 1 {
			n = 1
		}
		for range n {
			runtime.GC()
		}
		return fmt.Sprintf("n=%d", n), "", nil
	}}
}

// All is every family: the vocabulary of the full conformance module.
func All() []Family {
	return append(Basic(), LogLevel(), BufferStatus(), HeaderMapSize(), Status())
}

// Basic is every family whose host functions the SDK's proxytest emulator
// provides: All without LogLevel, BufferStatus, HeaderMapSize and Status.
func Basic() []Family {
	return []Family{Log(), Tick(), Buffer(), Headers(), Stream(), LocalResponse(), HTTPCall(),
		SharedData(), Queue(), Metrics(), Properties(), Runtime()}
}
