"""Measurement against a running stack (`reprise run` or compose), through its HTTP API and /v1/stats.

    replay   a workload (bench.workload) replayed through POST /v1/generations, each job's metrics read
             back into the report of bench.run (`reprise bench replay`)
    runner   what `reprise bench replay` does behind its option parsing: report, --json, --plots
    stack    what the stack ran with during a replay (pools and pool monitor over time), which
             `reprise bench simulate --compare` then runs too
    decodes  the replay's VAE decodes per job and per image read (LatentBox 4.1)
    video    FlexCache's figures read from a replay's video jobs (`reprise bench replay --video-frames`)
    streams  `reprise bench streams`: whether open event streams slow the workers
    reads    `reprise bench reads`: LatentBox's read path (dual-format caches, coalescing, spillover)
    demo     the demo `make run` (`reprise run --demo N`) plays once the stack is up

JSON contract. `replay --json`: the report's fields (bench.run) plus `stack` {profile, monitor, timeline,
...} and, for video jobs, `video`; results in `bench/results/replay/` and `bench/results/video/`
(stack-*.json). `streams --json`: options, rounds {baseline, streams, baseline_again}, run_time_ratio,
every_stream_saw_done (`bench/results/streams-*.json`). `reads --json`: setups {NAME: figures}, burst
{reads, decodes, coalesced}, parameters (`bench/results/reads-live.json`).
"""
