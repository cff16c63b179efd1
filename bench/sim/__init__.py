"""The simulators: the service's own policy code (jobs/) run on a trace with profiled costs instead of
GPUs, for the scales and the paper set-ups one machine cannot hold.

    simulate  a discrete-event simulation of the serving stack: admission, lookup, k selection,
              eviction and the match predictor, N workers per role, a cache budget
    config    a simulated deployment (SimConfig) and what one simulation gives back (SimResult)
    cache     the simulator's cache: entries, their latent states and counters, an exact nearest-neighbour
    lookup    how a simulated run looks prompts up, and what the report says about it
    report    a simulation's report, each request's quality predicted on a lab trace (bench.quality)
    pools     the simulated GPU workers, grouped by role, and the hook a pool monitor plugs into
    monitor   MoDM's global monitor (its PID controller, jobs.pools) moving workers between the pools
    cascade   DiffServe's cascade: a light stage, the discriminator's escalations, the allocator
    platform  the platform's per-job cost beyond the steps, from a replay's measured stages
    runner    what `reprise bench simulate` does behind its option parsing: sweeps, --compare, --json
    reads     the read side: LatentBox's read path at the paper's scale (`reprise bench reads --simulate`)
    video     FlexCache's video cache on a video trace (read by bench.video)

JSON contract. `simulate --json`: the report's fields (bench.run), a list of them with --sweep, each
run gaining `allocation_timeline` when MoDM's monitor moved its pools, with a replay given `platform`
(the platform cost charged, or why none) and with --compare `comparison` (each check, and what was
not checked); results in `bench/results/lab/` (sim-*.json, sweep-*.json). `reads --simulate --json`:
setups {NAME: figures}, burst, parameters, as the live read bench (`bench/results/reads-sim.json`).
"""
