package hostcalls

import "fmt"

// proxy_log(level, msg_ptr, msg_len) → status
//
//	msg_ptr ──► [ msg_len bytes of UTF-8 text ]   (read by the host)
//
// Results: OK; BAD_ARGUMENT for a level outside 0..5. Logging is the one
// host call allowed during module initialisation (init functions).
//
// proxy_get_log_level(ret_level_ptr) → status
//
//	ret_level_ptr ──► [ u32 LE level ]   (written by the host)
//
// Registered by cpp-host only for ABI 0.2.1; missing in proxytest. The Log
// functions below never call it (a module that logs must load in proxytest),
// so filtering by level is the host's job.

func logMessage(level LogLevel, msg string) {
	proxyLog(uint32(level), strPtr(msg), u32(len(msg)))
}

// LogTrace logs msg at level trace. It ignores failures (there is nowhere
// to report them). Like every Log function it may be called from init.
func LogTrace(msg string) { logMessage(LogLevelTrace, msg) }

// LogDebug logs msg at level debug.
func LogDebug(msg string) { logMessage(LogLevelDebug, msg) }

// LogInfo logs msg at level info.
func LogInfo(msg string) { logMessage(LogLevelInfo, msg) }

// LogWarn logs msg at level warn.
func LogWarn(msg string) { logMessage(LogLevelWarn, msg) }

// LogError logs msg at level error.
func LogError(msg string) { logMessage(LogLevelError, msg) }

// LogCritical logs msg at level critical.
func LogCritical(msg string) { logMessage(LogLevelCritical, msg) }

// LogTracef logs fmt.Sprintf(format, args...) at level trace.
func LogTracef(format string, args ...any) { logMessage(LogLevelTrace, fmt.Sprintf(format, args...)) }

// LogDebugf logs fmt.Sprintf(format, args...) at level debug.
func LogDebugf(format string, args ...any) { logMessage(LogLevelDebug, fmt.Sprintf(format, args...)) }

// LogInfof logs fmt.Sprintf(format, args...) at level info.
func LogInfof(format string, args ...any) { logMessage(LogLevelInfo, fmt.Sprintf(format, args...)) }

// LogWarnf logs fmt.Sprintf(format, args...) at level warn.
func LogWarnf(format string, args ...any) { logMessage(LogLevelWarn, fmt.Sprintf(format, args...)) }

// LogErrorf logs fmt.Sprintf(format, args...) at level error.
func LogErrorf(format string, args ...any) { logMessage(LogLevelError, fmt.Sprintf(format, args...)) }

// LogCriticalf logs fmt.Sprintf(format, args...) at level critical.
func LogCriticalf(format string, args ...any) {
	logMessage(LogLevelCritical, fmt.Sprintf(format, args...))
}

// Log logs msg at level and returns the host's status as an error.
func Log(level LogLevel, msg string) error {
	return Status(proxyLog(uint32(level), strPtr(msg), u32(len(msg)))).Err()
}

// GetLogLevel returns the host's current log level (proxy_get_log_level).
// Hosts without it (proxytest, ABI 0.2.0 hosts) fail to load a module that
// calls it.
func GetLogLevel() (LogLevel, error) {
	beginCall(0)
	if err := Status(proxyGetLogLevel(&retU32)).Err(); err != nil {
		return 0, err
	}
	return LogLevel(retU32), nil
}
