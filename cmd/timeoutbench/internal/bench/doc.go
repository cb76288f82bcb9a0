// Package bench measures timeoutmill's delayed delivery beside its peers, on one machine in one
// run: whether messages arrive early, how late they arrive, how many per second the pipeline
// sustains, and how the PostgreSQL store behaves with a million timeouts waiting.
//
// Every scenario sends messages through a delay mechanism (a System) to a destination it
// consumes, each message carrying its intended due time at nanosecond precision in HeaderDue, so
// lateness is the arrival minus that time, whatever the mechanism keeps. Two workloads run on
// each System:
//
//   - precision: a steady stream of messages with random delays of 1–5 s (sub-second parts);
//   - backlog: many messages due at one instant; drain rate = messages ÷ (last arrival − due
//     time), so the time the mechanism takes to notice the backlog counts.
//
// Beside them, ceilings measure what the machine can do without any delay (the raw broker round
// trip, the raw dead-letter path, the raw commit rates), and the scale scenario fills a
// PostgreSQL store with a million pending timeouts and measures the store rate, one claim and
// the service's resident memory.
//
// cmd/timeoutbench runs the suite and prints the table (make bench).
package bench
