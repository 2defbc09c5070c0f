package hostcalls

// proxy_set_tick_period_milliseconds(period_ms) → status
//
// No memory. Results: OK. The period is stored per root context (the one
// whose callback is running, or the effective context); 0 disables the
// timer. The host then calls proxy_on_tick(root) every period, which runs
// PluginContext.OnTick.

// SetTickPeriodMilliSeconds sets the tick period of the current root
// context in milliseconds (0 stops the ticks). Call it from OnPluginStart or
// a later root callback, never from init.
func SetTickPeriodMilliSeconds(ms uint32) error {
	return Status(proxySetTickPeriodMilliseconds(ms)).Err()
}
