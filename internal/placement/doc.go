// Package placement decides where queued GPU jobs run. It owns one pure
// function, Place: an immutable Snapshot of the GPUs (totals, sampled use,
// health, occupants) and the queue go in, a Plan comes out (jobs to start,
// on which GPUs, after freezing which processes; and for every other job a
// Reason and a Detail for humans). It imports only the standard library,
// does no I/O, reads no clock but Snapshot.Now and uses no randomness: the
// same input gives the same Plan, whatever the order of the GPUs, their
// occupants or the queue. "Does not fit" is a result, never an error.
//
// Memory, in MiB per GPU:
//   - Each occupant is charged by its kind (see OccupantKind): a declared
//     managed job its declaration, or its peak x (1 + SpikeBuffer) once past
//     it; an undeclared exclusive one, or a lease without an amount, the
//     whole GPU; external and other undeclared processes their peak x (1 +
//     SpikeBuffer); reservations their declaration; fillers what they use;
//     frozen processes nothing. Sampled use that no occupant accounts for
//     (driver overhead) is charged too.
//   - headroom = Total - charges, floored at 0. A declared job fits where
//     headroom >= VRAMMiB + MarginMiB and is charged VRAMMiB; an undeclared
//     one needs whole idle GPUs (no charged holder, unattributed use within
//     the margin) and is charged the whole GPU. Each start is charged before
//     the next job is placed.
//
// Stages, per job, in placement order:
//  1. Order: effective priority (Priority + one per AgingStep waited)
//     descending; at equal effective priority round-robin between owners
//     (an owner's k-th job goes in round k plus what the owner runs already,
//     Snapshot.Served; within a round the owner started least recently
//     first); then Seq. Without what owners were served, a queue that frees
//     room for one job at a time would start one owner's jobs, submitted
//     first, pass after pass: each is in the first round again once the one
//     before it ends.
//  2. Feasibility: against capacity = Total - charges of permanent
//     occupants, on the GPUs of its Only list that are not banned. A job
//     that can never fit goes to Plan.Infeasible and preempts nothing.
//  3. Filters: the Only list, and the health filters (banned, minimum free,
//     maximum utilization, maximum power; Options and the job's own, the
//     stricter winning; an unreported value passes). Utilization, power and
//     free memory are transient: they delay a job, never make it infeasible.
//  4. Best fit: the job takes the GPUs where it fits with the least headroom
//     (ties by lower Index). A job that does not fit does not stop later
//     ones from starting (backfill).
//  5. Preemption: else, freezing preemptible managed processes of lower
//     base priority (aging never preempts), the victim set holding the
//     fewest MiB over all its GPUs; each victim at most once per pass.
//  6. Wait: the reason, from no_memory/no_idle_gpu (not enough room even on
//     skipped GPUs) to unhealthy (room only on skipped GPUs) to reserved
//     (room only on GPUs held for a starving job). A job waiting at least
//     StarveAfter then holds the GPUs where it would fit soonest (most
//     headroom once non-permanent holders go), and later jobs in the pass
//     may not start on them.
//
// Scores, all in MiB: best fit minimizes headroom, in [0, Total]; a
// preemption minimizes the MiB frozen, in [0, Σ victims' charges], GPUs
// where the job already fits costing 0; a reservation maximizes headroom
// plus non-permanent charges, in [0, Total].
package placement
