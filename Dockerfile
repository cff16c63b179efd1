# Two images from one file (docker-compose.yml picks the target):
#   api     the API, beat, Flower and migrations: the base dependencies only, no torch (python:3.11-slim)
#   worker  every worker pool: the `worker` extra (torch, diffusers, open_clip...) on a CUDA base
# Dependencies are installed before any code is copied, so a code change rebuilds only the last layers.
# Both run as the unprivileged user `reprise` (uid 10001), which owns /data (its home too: the caches
# torch, Hugging Face and matplotlib keep under ~ land on the data volume) and nothing else; the code in
# /app and the virtual environment in /opt/venv stay root's, read-only to the processes.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# torch==2.14.1 in requirements.lock is the CUDA 13 build (nvidia-*-cu13 wheels: it brings its own CUDA
# runtime, cuBLAS and cuDNN), so the worker needs from its base only what the NVIDIA container runtime
# hooks into: the `base` flavour, not `runtime`/`cudnn` (gigabytes of libraries torch would not load).
# Hosts need an NVIDIA driver of the R580 series or newer (CUDA 13). Ubuntu 22.04 rather than 24.04: the
# deadsnakes PPA builds Python 3.11 for it (the version CI tests and requirements.lock resolves for;
# pyproject.toml allows 3.11 to 3.13), whereas 22.04's own python3 is 3.10 and 24.04's 3.12.
# requirements.lock carries hashes; each image installs only its part of it, as a constraints file,
# whose hashes pip checks from 26.1 on (older ones refuse every requirement the lock does not pin by
# itself): each image upgrades its pip first, and installs the project (no file to hash) with --no-deps.
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-base-ubuntu22.04

# ---- requirements: pyproject.toml's dependency lists, without the rest of pyproject.toml --------------
# An edit of pyproject.toml that leaves the dependencies alone (ruff, mypy, pytest settings) writes the
# same files here, and Docker then reuses the install layers below.
FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /spec
COPY pyproject.toml requirements.lock deploy/requirements.py ./
RUN python requirements.py pyproject.toml api > requirements-api.txt \
 && python requirements.py pyproject.toml worker > requirements-worker.txt \
 && rm pyproject.toml requirements.py

# ---- source: the code and the data it reads next to its modules -----------------------------------------
# Every package of pyproject.toml's [tool.setuptools.packages.find] (tests/test_docker_compose.py checks
# the list), with lab/weights and lab/profiles, migrations/script.py.mako and bench/results/lab. The
# packages read those through their own __file__, and setuptools ships no package data for them, so the
# images install the project editable (`pip install -e`): the code runs in place from /app.
FROM scratch AS source
COPY pyproject.toml README.md /app/
COPY core /app/core
COPY reprise /app/reprise
COPY api /app/api
COPY jobs /app/jobs
COPY lab /app/lab
COPY workers /app/workers
COPY db /app/db
COPY bench /app/bench
COPY migrations /app/migrations

# ---- api: the API, beat, Flower, migrate ---------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS api
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /data --shell /usr/sbin/nologin reprise \
 && mkdir -p /data && chown reprise:reprise /data
COPY --from=requirements /spec/requirements-api.txt /spec/requirements.lock /tmp/spec/
RUN pip install 'pip>=26.1' && pip install -c /tmp/spec/requirements.lock -r /tmp/spec/requirements-api.txt
WORKDIR /app
COPY --from=source /app /app
RUN pip install --no-deps -e . && rm -rf /tmp/spec
ENV HF_HUB_OFFLINE=1 REPRISE_DATA_DIR=/data
USER reprise
EXPOSE 8000 5555 9000
CMD ["reprise", "api", "--host", "0.0.0.0"]

# ---- worker: every pool (admit, large, small, decode, io) ----------------------------------------------
FROM ${CUDA_IMAGE} AS worker
ARG DEBIAN_FRONTEND=noninteractive
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gpg-agent software-properties-common \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && apt-get purge -y --auto-remove gpg-agent software-properties-common \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /data --shell /usr/sbin/nologin reprise \
 && mkdir -p /data && chown reprise:reprise /data
COPY --from=requirements /spec/requirements-worker.txt /spec/requirements.lock /tmp/spec/
RUN pip install 'pip>=26.1' && pip install -c /tmp/spec/requirements.lock -r /tmp/spec/requirements-worker.txt
WORKDIR /app
COPY --from=source /app /app
RUN pip install --no-deps -e . && rm -rf /tmp/spec
ENV HF_HUB_OFFLINE=1 REPRISE_DATA_DIR=/data
USER reprise
EXPOSE 9100
CMD ["reprise", "worker", "--role", "large"]
