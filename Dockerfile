# One image for every Reprise process; the command picks the role (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml requirements.lock README.md ./
COPY reprise reprise
COPY api api
COPY jobs jobs
COPY workers workers
COPY db db
COPY migrations migrations
COPY bench bench
RUN pip install --no-cache-dir -c requirements.lock '.[worker]'
ENV HF_HUB_OFFLINE=1 REPRISE_DATA_DIR=/data
EXPOSE 8000 5555
CMD ["reprise", "api"]
