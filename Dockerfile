# The runtime in a container: `docker build -t goondan .`, then
#   docker run --rm -e GOONDAN_API_TOKEN=choose-one -p 127.0.0.1:8080:8080 -v goondan-state:/state goondan
# serves the offline example swarm; mount your own bundle over /swarm (and pass its keys with
# -e or --env-file) to serve yours.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# tini is PID 1: signals reach the daemon (which drains its agents), zombies are reaped.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

COPY . /src
RUN pip install '/src[openai,anthropic,mcp,cluster]' \
    && useradd --system --create-home --uid 10001 goondan \
    && mkdir /swarm /state \
    && chown 10001:10001 /state
COPY goondan.yaml.example /swarm/goondan.yaml

USER 10001:10001
WORKDIR /swarm
VOLUME ["/state"]
EXPOSE 8080

# The API's health route, asked over its Unix socket (no token needed there).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import pathlib, sys; from orchestrator.http.client import DaemonApi; sys.exit(DaemonApi(pathlib.Path('/state'), timeout=4).call('GET', '/healthz')[0] != 200)"]

ENTRYPOINT ["tini", "--", "python", "-m", "orchestrator"]
CMD ["run", "goondan.yaml", "--state-dir", "/state", "--listen", "0.0.0.0:8080", "--api-token-env", "GOONDAN_API_TOKEN"]
