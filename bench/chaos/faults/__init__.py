"""The chaos scenarios whose fault is more than a kill and a restart, one module each:

    broker   redis-empty: Redis killed and restarted with its data deleted (a broker without persistence)
    network  the fault proxy between the workers and Redis and Postgres: latency, drops, resets
    disk     disk-full: the workers' writes fail (RLIMIT_FSIZE) while images are read
    node     node-loss: a second node of workers started, then every process of it SIGKILLed
    freeze   worker-freeze: the large worker SIGSTOPped mid-run (hung but alive), replaced by the supervisor

Each fault takes the scenario's Run (bench.chaos.run), breaks its thing, mends it and returns when
(time.time) the fault ended; figures of its own go into run.extra.
"""
