/// Agent: the session supervisor: states, push-to-talk, reconnect with backoff,
/// rollover and watchdog health, driven by the loop with time as an input.
import Wire
