# effect-broker: the proxy image. Build: docker build -t effect-broker .
# The image runs `effect-broker serve`; it needs EFFECT_BROKER_DATABASE_URL and
# EFFECT_BROKER_MASTER_KEY (see docker-compose.yml and deploy/). It runs as uid 10001,
# named by number so that Kubernetes' runAsNonRoot can verify it is not root.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
# The server is the package's `server` extra (the bare package is the agent-side
# client); every wheel built here, the server's libraries included, is installed below.
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[server]'

FROM python:3.11-slim
RUN groupadd --system --gid 10001 broker \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --create-home broker
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
WORKDIR /app
COPY --chown=10001:10001 routes.yaml ./routes.yaml
USER 10001:10001
ENV EFFECT_BROKER_LISTEN=0.0.0.0:8080 \
    EFFECT_BROKER_ADMIN_LISTEN=0.0.0.0:8081 \
    EFFECT_BROKER_ROUTES=/app/routes.yaml \
    PYTHONUNBUFFERED=1
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8081/readyz', timeout=2)"]
ENTRYPOINT ["effect-broker"]
CMD ["serve"]
