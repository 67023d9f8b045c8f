"""The deployment files: Kubernetes manifests against the Kubernetes schemas, systemd units with
systemd-analyze and for real, the Dockerfile with hadolint, the Grafana dashboard against the
/metrics of a live service."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fenceline.client import IpcClient, View
from fenceline.metrics import Metrics
from tests.support.helpers import open_session
from tests.support.service import Service, free_port, stop_service, wait_ready

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
ENTRYPOINT = DEPLOY / "docker" / "entrypoint.sh"


def tool(name: str) -> str:
    path = shutil.which(name, path=f"{BIN}:/usr/bin:/bin")
    if path is None:
        pytest.skip(f"{name} is not installed (the test extra brings it on x86_64)")
    return path


# -- Kubernetes -------------------------------------------------------------------------------


def manifests() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.mark.parametrize("version", ["1.28.0", "1.37.0"])
def test_kubernetes_manifests_are_valid_against_the_strict_schemas(version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate.utils")
    docs = manifests()
    assert {d["kind"] for _, d in docs} >= {"DaemonSet", "Namespace", "Pod"}
    for name, doc in docs:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{name}: {doc['kind']} invalid for Kubernetes {version}: {e.message} "
                        f"at {'.'.join(map(str, e.path))}")  # fmt: skip


def test_kubernetes_schema_check_rejects_a_misspelt_field() -> None:
    kv = pytest.importorskip("kubernetes_validate.utils")
    ds = next(d for _, d in manifests() if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["hostIpc"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, "1.37.0", strict=True)


def _daemonset() -> tuple[dict[str, Any], dict[str, Any]]:
    ds = next(d for _, d in manifests() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    return ds, pod


def test_daemonset_runs_on_gpu_nodes_with_probes_on_the_service_routes(service: Service) -> None:
    ds, pod = _daemonset()
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    port = container["ports"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] in (port["name"], port["containerPort"])
        assert httpx.get(service.url + get["path"], timeout=5).status_code == 200, probe
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port["containerPort"]
    assert httpx.get(service.url + annotations["prometheus.io/path"], timeout=5).status_code == 200
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["FENCELINE_PORT"]) == port["containerPort"]


def test_renderer_pods_share_the_socket_directory_and_uid_of_the_daemonset() -> None:
    _, pod = _daemonset()
    renderer = next(d for _, d in manifests() if d["kind"] == "Pod")["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    socket_dir = str(Path(env["FENCELINE_SOCKET"]).parent)

    def host_dir(spec: dict[str, Any], container: dict[str, Any]) -> str:
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == socket_dir)
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        return str(volume["hostPath"]["path"])

    assert host_dir(pod, pod["containers"][0]) == host_dir(renderer, renderer["containers"][0])
    assert renderer["securityContext"]["runAsUser"] == pod["securityContext"]["runAsUser"]
    assert renderer.get("hostIPC", False) == pod.get("hostIPC", False)


def test_daemonset_http_off_loopback_needs_a_token_and_shares_no_host_ipc() -> None:
    """Anything in the cluster may reach port 8000: it must not import the node's /dev/shm
    (no hostIPC), and every route but the probes needs the token from a Secret."""
    _, pod = _daemonset()
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["FENCELINE_HOST"] not in ("127.0.0.1", "::1")
    assert not pod.get("hostIPC", False)
    token_dir = str(Path(env["FENCELINE_TOKEN_FILE"]).parent)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == token_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] and not volume["secret"].get("optional", False)
    policy = next(d for _, d in manifests() if d["kind"] == "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= (
        _daemonset()[0]["spec"]["template"]["metadata"]["labels"].items()
    )


def test_every_fenceline_variable_of_the_daemonset_is_read_by_the_entrypoint() -> None:
    _, pod = _daemonset()
    script = ENTRYPOINT.read_text()
    for e in pod["containers"][0]["env"]:
        assert "${" + e["name"] + ":-" in script, e["name"]


# -- systemd ----------------------------------------------------------------------------------

SYSTEM_UNIT = DEPLOY / "systemd" / "fenceline.service"
USER_UNIT = DEPLOY / "systemd" / "user" / "fenceline.service"


def exec_start(unit: Path) -> list[str]:
    text = unit.read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=").split()


def unit_with_local_binary(unit: Path, tmp_path: Path) -> Path:
    binary = exec_start(unit)[0]
    out = tmp_path / unit.name
    out.write_text(unit.read_text().replace(binary, str(BIN / "fenceline")))
    return out


def test_system_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    unit = unit_with_local_binary(SYSTEM_UNIT, tmp_path)
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # warnings count as failures


def test_user_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    unit = unit_with_local_binary(USER_UNIT, tmp_path)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(run), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([analyze, "--user", "verify", str(unit)], capture_output=True, text=True,
                       timeout=60, env=env)  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_system_unit_is_sandboxed_yet_keeps_dev_shm_and_gpu_nodes(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    unit = unit_with_local_binary(SYSTEM_UNIT, tmp_path)
    r = subprocess.run([analyze, "security", "--offline=yes", str(unit)], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= 2.5, r.stdout
    settings = dict(
        line.split("=", 1) for line in SYSTEM_UNIT.read_text().splitlines()
        if "=" in line and not line.startswith(("#", " ", "DeviceAllow"))
    )  # fmt: skip
    # A private /dev would hide /dev/shm and the GPU; RemoveIPC would delete renderers' frames.
    assert settings["PrivateDevices"] == "no"
    assert settings["RemoveIPC"] == "no"
    assert settings["ProtectSystem"] == "strict"
    assert settings["Restart"] == "on-failure"
    allowed = {ln.split("=", 1)[1] for ln in SYSTEM_UNIT.read_text().splitlines()
               if ln.startswith("DeviceAllow=")}  # fmt: skip
    # The names NVIDIA driver 580 gives its device nodes' majors in /proc/devices.
    assert {"char-nvidia rw", "char-nvidiactl rw", "char-nvidia-uvm rw"} <= allowed


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_unit_command_line_starts_a_working_service(
    unit: Path, model_repo: Path, tmp_path: Path
) -> None:
    """The unit's ExecStart, with %t/%h and the paths pointed here, serves for real."""
    args = exec_start(unit)[1:]
    assert args[0] == "serve"
    port = free_port()
    runtime_dir = tmp_path / "run"
    words = []
    for word in args[1:]:
        word = word.replace("%t", str(runtime_dir)).replace("%h", str(tmp_path))
        words.append(word)
    for flag, value in (("--model-repository", str(model_repo)), ("--port", str(port))):
        if flag in words:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    socket = Path(words[words.index("--socket") + 1])
    assert socket == runtime_dir / "fenceline" / "fenceline.sock"
    log = tmp_path / "unit.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(BIN / "fenceline"), "serve", *words], stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    svc = Service(proc, f"http://127.0.0.1:{port}", socket, log)
    try:
        wait_ready(proc, svc.url, socket, log=log.read_text)
        with IpcClient(socket) as client:
            s = open_session(client, "add_64x64", [1, 3, 64, 64])
            s.x[:] = 2
            s.wait.signal(1)
            client.run(s.session_id, 1)
            assert float(s.y[0, 0, 0, 0]) == 3.0
            s.close()
    finally:
        stop_service(svc)
    assert proc.returncode == 0, log.read_text()


# -- Docker -----------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    hadolint = tool("hadolint")
    r = subprocess.run([hadolint, "--no-color", "--failure-threshold", "style", "Dockerfile"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def test_entrypoint_passes_shellcheck() -> None:
    shellcheck = tool("shellcheck")
    r = subprocess.run([shellcheck, "--shell=sh", "--severity=style", str(ENTRYPOINT)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def _dockerignore_allows(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matches a path or its parents."""
    allowed = True
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        p = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, p) for prefix in prefixes):
            allowed = negate
    return allowed


def test_dockerfile_copies_only_files_that_exist_and_the_context_lets_through() -> None:
    patterns = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]  # fmt: skip
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    assert "deploy/docker/entrypoint.sh" in sources
    for src in sources:
        assert (ROOT / src).exists(), src
        files = [src] if (ROOT / src).is_file() else [
            str(f.relative_to(ROOT)) for f in (ROOT / src).rglob("*") if f.is_file()
            and "__pycache__" not in f.parts and f.suffix not in (".so", ".pyc")
        ]  # fmt: skip
        for f in files:
            assert _dockerignore_allows(patterns, f), f"{f} is excluded by .dockerignore"
    for excluded in (".venv/bin/python", "tests/conftest.py", "build/x", ".git/HEAD"):
        assert not _dockerignore_allows(patterns, excluded), excluded


def test_docker_healthcheck_and_entrypoint_are_the_ones_tested_here() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r'HEALTHCHECK .*\n\s+CMD \["fenceline-entrypoint", "healthcheck"\]', text)
    assert re.search(r"^COPY --chmod=0755 deploy/docker/entrypoint.sh "
                     r"/usr/local/bin/fenceline-entrypoint$", text, re.M)  # fmt: skip
    assert 'ENTRYPOINT ["fenceline-entrypoint"]' in text
    assert re.search(r"^USER 10001:10001$", text, re.M)


# -- Grafana ----------------------------------------------------------------------------------

DASHBOARD = DEPLOY / "grafana" / "fenceline.json"
METRIC = re.compile(r"\b((?:fenceline|process)_[a-z0-9_]+)")
BY = re.compile(r"\bby \(([^)]*)\)")
SELECTOR = re.compile(r"\b((?:fenceline|process)_[a-z0-9_]+)\{([^}]*)\}")
PROMETHEUS_LABELS = {"instance", "job"}  # added by the scrape, not by the service
# Declared in /metrics everywhere, with samples only once a CUDA session ran (tests/gpu).
GPU_ONLY = {"fenceline_gpu_runs_total", "fenceline_gpu_sessions_active", "fenceline_gpu_imported_bytes"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_dashboard_is_well_formed() -> None:
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("runs / s", "run latency", "wait", "inference", "errors", "imported memory",
                  "ipc connections", "streamed frames", "kserve requests", "cuda runs",
                  "memory and open files"):  # fmt: skip
        assert topic in titles, topic
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]
    quantile = re.compile(r"histogram_quantile\(([\d.]+)")
    quantiles = {float(q) for e in dashboard_exprs() for q in quantile.findall(e)}
    assert quantiles == {0.5, 0.99}


def test_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


@dataclass
class Exposition:
    """What a live /metrics says: the series with samples (name -> label names) and every
    declared family, sampled or not (a labelled metric with no children yet has none)."""

    sampled: dict[str, set[str]]
    declared: set[str]


@pytest.fixture(scope="module")
def metrics_after_traffic(service: Service) -> Exposition:
    """/metrics once a run, a streamed frame, a KServe request, an import and an error happened."""
    with IpcClient(service.socket) as client:
        s = open_session(client, "add_64x64", [1, 3, 64, 64])
        s.wait.signal(1)
        client.run(s.session_id, 1)
        client.release_session(s.session_id)
        shape, nbytes = [1, 3, 64, 64], 3 * 64 * 64 * 4
        stream = client.create_session(
            "add_64x64", {"x": View(s.memory_id, "FP32", shape)},
            {"y": View(s.memory_id, "FP32", shape, nbytes)}, s.wait_id, s.signal_id,
            mode="streaming", policy="every", start=False,
        )
        client.start_session(stream["id"])
        s.wait.signal(2)
        assert s.signal.wait(2, timeout_s=60)
        client.stop_session(stream["id"])
        infer = httpx.post(service.url + "/v2/models/add_64x64/infer", timeout=30, json={
            "inputs": [{"name": "x", "datatype": "FP32", "shape": shape, "data": [0.0] * (nbytes // 4)}],
        })
        assert infer.status_code == 200, infer.text
        # A region nobody registered: the request fails once its model is found.
        unknown = {"shared_memory_region": "never-registered", "shared_memory_byte_size": nbytes}
        wrong = httpx.post(service.url + "/v2/models/add_64x64/infer", timeout=30, json={
            "inputs": [{"name": "x", "datatype": "FP32", "shape": shape, "parameters": unknown}],
        })
        assert wrong.status_code == 404, wrong.text
        missing = httpx.get(service.url + "/v2/interop/sessions/nonexistent", timeout=5)
        assert missing.status_code == 404
        text = httpx.get(service.url + "/metrics", timeout=5).text
        s.close()
    sampled: dict[str, set[str]] = {}
    declared: set[str] = set()
    for family in text_string_to_metric_families(text):
        declared.add(family.name)
        declared.add(family.name + ("_total" if family.type == "counter" else ""))
        for sample in family.samples:
            sampled.setdefault(sample.name, set()).update(sample.labels)
    return Exposition(sampled, declared)


def declared_labels(metric: str) -> set[str]:
    """The label names the service declares for ``metric`` (fenceline/metrics.py)."""
    base = metric.removesuffix("_total")
    for suffix in HISTOGRAM_SUFFIXES:
        base = base.removesuffix(suffix)
    for collector in vars(Metrics()).values():
        if getattr(collector, "_name", None) == base:
            return set(collector._labelnames)
    raise AssertionError(f"{metric} is not declared in fenceline/metrics.py")


def test_every_metric_the_dashboard_queries_exists_in_metrics(
    metrics_after_traffic: Exposition,
) -> None:
    queried = {m for e in dashboard_exprs() for m in METRIC.findall(e)}
    assert len(queried) >= 20
    assert queried >= GPU_ONLY
    missing = sorted(queried - set(metrics_after_traffic.sampled) - GPU_ONLY)
    assert not missing, f"the dashboard queries metrics /metrics has no samples of: {missing}"
    for metric in GPU_ONLY:
        assert metric in metrics_after_traffic.declared, f"{metric} is not declared in /metrics"


def test_every_label_the_dashboard_groups_or_filters_by_exists_on_its_metric(
    metrics_after_traffic: Exposition,
) -> None:
    def labels(metric: str) -> set[str]:
        if metric in GPU_ONLY:
            return declared_labels(metric) | PROMETHEUS_LABELS
        return metrics_after_traffic.sampled[metric] | PROMETHEUS_LABELS

    for expr in dashboard_exprs():
        have = set.union(*(labels(m) for m in METRIC.findall(expr)))
        for group in BY.findall(expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in have, f"{label!r} in {expr}"
        for metric, matchers in SELECTOR.findall(expr):
            for label in re.findall(r"(\w+)\s*=~?", matchers):
                assert label in labels(metric), f"{label!r} in {expr}"


def test_unit_files_and_manifests_name_the_port_the_service_listens_on() -> None:
    _, pod = _daemonset()
    assert pod["containers"][0]["ports"][0]["containerPort"] == 8000
    assert "--port 8000" in SYSTEM_UNIT.read_text()
    assert "EXPOSE 8000" in (ROOT / "Dockerfile").read_text()

