"""FlexCache (papers/flexcache) in figures: `reprise bench video`.

    runner       the command: compression measured on the tiny video model, then hit rate, compute
                 saved and throughput of FlexCache's configurations through the simulator (bench.sim.video)
    compression  bytes per compression technique of cached video states, and the error a hit resumed
                 from the decompressed state carries (4.1, 6.2.4)
    trace        video prompt traces whose objects and backgrounds recur independently (3.1.2, Fig. 7)

JSON contract of `video --json`: compression {intra, inter, total}, resume_error, hit_rate
{whole_prompt, decoupled}, compute_saved, throughput_rps, vanilla_throughput_rps, then context fields
(trace, requests, configurations, compression_detail...); results in `bench/results/video/`. The same
figures measured on a stack come from `reprise bench replay --video-frames` (bench.live.video).
"""
