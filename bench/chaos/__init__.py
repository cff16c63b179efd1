"""Faults against a stack: `reprise bench chaos` kills a GPU pool, Postgres or Redis, takes the webhook
receiver down, storms cancels and loads the intake, and checks that nothing accepted is lost and no
effect happens twice.

    runner     the scenarios in order against one stack (its own, isolated, or a running one)
    scenarios  each scenario: submit, break one thing, end the fault, wait, account
    target     the stack driven and how it is broken (SIGKILL through the pidfiles)
    load       intake load from concurrent clients; probe: a client's view while a fault lasts
    receiver   the webhook receiver; accounting: what became of each job (Postgres and deliveries)

JSON contract of `chaos --json`: scenarios {NAME: {accepted, succeeded, failed, lost, duplicated,
recovery_s {p50, max}, unavailable_s, five_xx, ...}}, intake {submit_rps, submit_ms {p50, p99}}.
"""
