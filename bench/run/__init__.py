"""What a benchmark run is, whether replayed on a running stack (bench.live) or simulated (bench.sim),
so that the two report the same fields of the same requests and can be compared field by field.

    profiles  which caching design a run measures (vanilla, nirvana, nirvana-womp, modm, configured,
              diffserve, reprise) and the settings it needs
    costs     the models' profiled costs: a denoising step per model, a decode, a cache entry's bytes
    runtime   `reprise bench runtime`: those costs measured on the configured models
    outcomes  what happened to each request, summarised into a report
    report    the report and its JSON and markdown forms
    compare   whether a simulation agrees with a replay (`reprise bench simulate --compare`)
    plots     PNG figures of reports (over the trace, against cache size, against the rate)
    options   the options replay and simulate take alike, parsed from their command-line values
    progress  the progress bar both draw on stderr

JSON contract of `reprise bench replay|simulate --json` (bench.run.report.REPORT_FIELDS): profile,
requests, hit_rate, k_histogram, compute_saved, throughput_rps, vanilla_throughput_rps, latency_ms
{p50, p95, p99}, slo_violations {x2, x4}, admission_ms {p50, p99}, entry_bytes, png_bytes, embedder,
trace, arrivals, decodes, quality, escalation_rate, threshold_timeline; a sweep adds cache_bytes and
policy (SWEEP_FIELDS). `reprise bench runtime --json`: large_step_ms, small_step_ms, decode_ms,
codec_ratio, entry_bytes, png_bytes, resume_exact (what `--costs FILE` reads); with `--batch`,
batch {n: {images_per_s, step_ms, unet_ms, max_abs_diff}}, batch_max_abs_diff, batch_exact, batch_atol,
batch_within_atol and batch_model (step-level batching, bench.run.runtime).
"""
