// Package logbudget holds what the logs of each user's live processes hold
// on disk together to a budget. Each log is capped on its own (its
// supervisor rotates it), but a user with many processes holds many caps:
// past the budget, the user's rotated copies go first, the oldest first,
// then the user's largest logs are emptied in place with a line saying why.
// What all users' live logs hold together may be held too: past it each
// user is cut to an equal share (fairshare.Level), the largest holders
// first. [Select] decides, pure; a [Keeper] reads the sizes and cuts, once
// a tick.
package logbudget
