# syntax=docker/dockerfile:1
# fenceline's image (docs/deploy.md):
#   docker build -t fenceline:0.1.0 .
#   docker run --ipc=host -p 127.0.0.1:8000:8000 -v /run/fenceline:/run/fenceline \
#       -v "$PWD/models:/models:ro" fenceline:0.1.0
# The renderer container mounts the same /run/fenceline (the IPC socket, owner-only: run it as
# UID 10001 too) and, for named /dev/shm frames, shares /dev/shm: --ipc=host on both, or one
# container's IPC namespace (--ipc=container:NAME) or a shared tmpfs volume at /dev/shm.
# GPU: --build-arg ONNXRUNTIME='onnxruntime-gpu' and docker run --gpus all.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
# The native extension needs a C++17 compiler; pybind11 and scikit-build-core come from the
# build isolation environment that pip sets up. Debian's versions move with the base image, so
# pinning them would only break rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ make cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY native/ native/
COPY service/ service/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ARG ONNXRUNTIME=onnxruntime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FENCELINE_HOST=0.0.0.0 \
    FENCELINE_PORT=8000 \
    FENCELINE_SOCKET=/run/fenceline/fenceline.sock \
    FENCELINE_MODEL_REPOSITORY=/models \
    FENCELINE_LOG_FORMAT=json
RUN groupadd --system --gid 10001 fenceline \
    && useradd --system --uid 10001 --gid fenceline --home-dir /var/lib/fenceline \
        --create-home --shell /usr/sbin/nologin fenceline \
    && install -d -o fenceline -g fenceline -m 0700 /run/fenceline \
    && install -d -o fenceline -g fenceline -m 0755 /models
COPY --from=build /wheels/ /wheels/
# onnxruntime and onnxruntime-gpu install the same module: swap the package, not add one.
# The wheel's requirements set the versions; ONNXRUNTIME may carry a pin (onnxruntime-gpu==X).
# hadolint ignore=DL3013
RUN pip install --no-cache-dir /wheels/*.whl \
    && if [ "$ONNXRUNTIME" != onnxruntime ]; then \
        pip uninstall --yes onnxruntime && pip install --no-cache-dir "$ONNXRUNTIME"; \
    fi \
    && rm -rf /wheels
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/fenceline-entrypoint
USER 10001:10001
WORKDIR /var/lib/fenceline
EXPOSE 8000
VOLUME ["/run/fenceline"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["fenceline-entrypoint", "healthcheck"]
ENTRYPOINT ["fenceline-entrypoint"]
CMD []
