"""Pool control: MoDM's global monitor (5.3) moving GPU workers between the large and the small pool.

policy     the decision, pure: Algorithm 1's equations, the PID controller, the bounds on N_large and
           which workers move (no I/O, no clock)
loop       one period chained once: measure -> pin -> decide -> actuate -> record, with the measuring,
           moving and recording side injected (the service's or the simulator's, bench.sim.monitor)
rebalance  the service's side and the beat task's body: statistics from Postgres, workers through the
           actuator, the record in db.pools
actuator   sends to the workers over Celery's remote control: who hosts what, and "move to that pool"
pins       the operator's override (`reprise pools pin|unpin`): a pinned worker stays where it was put

The record is db.pools (worker_roles: who hosts what and the pins; pool_decisions: each decision and
the PID's memory). The worker-side half is in workers/: workers.role_switch answers the actuator,
changes the worker's queues in its main process and the model in its pool child (refusing, for
requeue, a task of a pool it left); workers.registry records the worker at start and stop and starts
it in its pinned pool. The queues each role consumes: jobs.queues.QUEUES_BY_ROLE, read through
workers.role_switch.consumed_queues (a large worker's hits follow settings.large_serves_hits).

Nothing here imports torch or diffusers: beat and the API import it.
"""
