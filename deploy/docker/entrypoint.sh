#!/bin/sh
# The container's entrypoint (docs/deploy.md): turns FENCELINE_* variables into the flags of
# `fenceline serve` and execs it, so the service is PID 1 and gets SIGTERM itself.
#
#   entrypoint.sh [serve flags...]   the service; flags are appended after the variables' flags
#   entrypoint.sh healthcheck        exit 0 when GET /v2/health/ready answers 200 (HEALTHCHECK)
#   entrypoint.sh COMMAND [ARGS...]  run COMMAND instead (fenceline bench, sh, ...)
set -eu

host=${FENCELINE_HOST:-0.0.0.0}
port=${FENCELINE_PORT:-8000}
socket=${FENCELINE_SOCKET:-/run/fenceline/fenceline.sock}
repository=${FENCELINE_MODEL_REPOSITORY:-/models}
log_format=${FENCELINE_LOG_FORMAT:-json}
log_level=${FENCELINE_LOG_LEVEL:-info}
shm_dir=${FENCELINE_SHM_DIR:-/dev/shm}
shm_warn_mib=${FENCELINE_SHM_WARN_MIB:-256}
token_file=${FENCELINE_TOKEN_FILE:-}

log() {
    if [ "$log_format" = json ]; then
        printf '{"level": "%s", "logger": "fenceline.entrypoint", "message": "%s"}\n' "$1" "$2" >&2
    else
        printf 'fenceline-entrypoint: %s: %s\n' "$1" "$2" >&2
    fi
}

if [ "${1:-}" = healthcheck ]; then
    exec python3 -c 'import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=3).status == 200 else 1)
except Exception as e:
    print(f"not ready: {e}", file=sys.stderr)
    sys.exit(1)' "http://127.0.0.1:${port}/v2/health/ready"
fi

if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

# Named frames (host_shm) live in /dev/shm; Docker gives a container 64 MiB of its own.
if shm_kib=$(df -Pk "$shm_dir" 2>/dev/null | awk 'NR == 2 { print $2 }') && [ -n "$shm_kib" ]; then
    if [ "$shm_kib" -lt $((shm_warn_mib * 1024)) ]; then
        log warning "$shm_dir has $((shm_kib / 1024)) MiB: renderers sharing named frames need the same, larger /dev/shm (docker run --ipc=host, or a shared /dev/shm volume); memfd frames over the socket do not"
    fi
fi

set -- --host "$host" --port "$port" --socket "$socket" \
    --log-format "$log_format" --log-level "$log_level" "$@"
if [ -n "$token_file" ]; then
    set -- --token-file "$token_file" "$@"
fi
if [ -d "$repository" ]; then
    set -- --model-repository "$repository" "$@"
else
    log warning "no model repository at $repository: mount one (DIR/<name>/<version>/model.onnx) or set FENCELINE_MODEL_REPOSITORY"
fi
exec fenceline serve "$@"
