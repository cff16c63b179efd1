"""Faults against a stack: `reprise bench chaos` kills a GPU pool, Postgres or Redis, brings Redis back
empty, takes the webhook receiver down, makes the workers' network slow and lossy and their disk full,
loses a whole node, storms cancels and loads the intake, and checks that nothing accepted is lost and no
effect happens twice.

    runner     the scenarios in order against one stack (its own, isolated, or a running one)
    stack      the bench's own stack (optionally behind the fault proxy, or on S3 blobs)
    scenarios  each scenario: submit, break one thing, end the fault, wait, account
    run        one scenario's run: its options and state, submit, cancel, wait (scenarios and faults take it)
    faults/    the faults that are more than a kill: redis-empty, network, disk-full, node-loss
    proxy      the TCP fault proxy (latency, drops, resets) of the network scenario
    target     the stack driven and how it is broken (SIGKILL through the pidfiles)
    load       intake load from concurrent clients; probe: a client's view while a fault lasts
    receiver   the webhook receiver; accounting: what became of each job (Postgres and deliveries)

JSON contract of `chaos --json`: scenarios {NAME: {accepted, succeeded, failed, lost, duplicated,
recovery_s {p50, max}, running_recovery_s {p50, max, jobs}, lost_detail, unavailable_s, five_xx, jobs,
outage_s, settings, ...}}, intake {submit_rps,
submit_ms {p50, p99}}; NAME is NAME@<s>s for a scenario run at several outage lengths.
"""
