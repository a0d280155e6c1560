# One image for every stream-dp process (ingest worker, release worker, replay, tail, budget).
# docker-compose.yml builds it; the process is chosen by the service's command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY stream_dp ./stream_dp
COPY workers ./workers
COPY config ./config
# A regular (non-editable) install: the default config ships inside the package as package data.
RUN pip install . && rm -rf /src \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin streamdp

USER streamdp
WORKDIR /home
EXPOSE 9108
# Workers stop cleanly on SIGTERM (docker stop): finish the batch, commit, exit.
STOPSIGNAL SIGTERM
CMD ["stream-dp", "--help"]
