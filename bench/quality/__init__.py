"""The judge's quality of what the service serves: the lab's judge on the lab's models, CLIP score on
others.

    profiling  `reprise profile k`: NIRVANA's Algorithm 1 (which k each similarity allows), over profile
    plots      its figure: the quality drop of hits against similarity, one line per k (NIRVANA Fig. 9)
    sampler    batched sampling: the runtime's denoising, many prompts at once
    compare    `reprise lab quality`: how well each model draws the lab's prompts
    cascade    `reprise cascade train`: DiffServe's discriminator (3.2) and the cascade measured with it
    model      quality in simulation: a hit's score predicted from a profile (bench.sim)
    replayed   quality in a replay: the workers' recorded scores and a sample of fresh generations

JSON contract. `profile k --json`: table, embedder, models, tolerance, mode, judge, ks, steps, pairs,
curve, measurements...; `lab quality --json`: prompts, steps, guidance, seed, true_renders, chance,
models; `cascade train --json`: light_only, heavy_only, cascade, curve, samples, routing_auc, ...
Results in `bench/results/lab/`; the profiles the simulator reads ship in `lab/profiles/`. In a
replay's or a simulation's report, `quality` {hit_mean, hit_p5, miss_mean, drop_mean, hit_drop_mean,
judged, compared, source}.
"""
