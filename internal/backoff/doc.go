// Package backoff spaces out the retries of actions that keep failing:
// after each failure of an action on a subject the next try waits twice as
// long as the last (from a minimum up to a maximum), until the action
// succeeds, its subject changes or its key goes. A caller reports each
// failure streak once, when Fail starts it.
//
// Time is the caller's: every method takes the current time, so the whole
// state machine is driven by an injected clock.
package backoff
