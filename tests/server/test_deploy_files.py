"""deploy/ stays consistent with the server: HAProxy accepts the config, every `strata` command line in the
compose file, the Kubernetes manifest and the Dockerfile parses with today's CLI, and each orchestrator
waits longer than the drain it asks for before killing a replica."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from balancer_helpers import CONFIG, haproxy_or_skip

from server.serve import GRACEFUL_TIMEOUT_S
from strata.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def manifest() -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all((DEPLOY / "kubernetes" /
                                                                                    "strata.yaml").read_text())}


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)s", text)
    assert match, text
    return float(match.group(1))


def test_haproxy_accepts_the_shipped_config():
    done = subprocess.run([haproxy_or_skip(), "-c", "-f", str(CONFIG)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_strata_command_line_parses():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    pod = manifest()["Deployment/strata"]["spec"]["template"]["spec"]
    lines = [cmd, pod["containers"][0]["args"], pod["initContainers"][0]["args"],
             *(service["command"] for service in compose()["services"].values() if "command" in service)]
    parser = build_parser()
    for argv in lines:
        if argv[0] == "models":         # its own parser (strata/model_store.py); fetch with no name is valid
            assert argv == ["models", "fetch"]
            continue
        args = parser.parse_args(argv)
        assert args.command == "serve" and args.host == "0.0.0.0" and args.port == 8080


def _drain(argv: list[str]) -> float:
    return build_parser().parse_args(argv).drain_timeout


def test_orchestrators_wait_longer_than_the_drain():
    pod = manifest()["Deployment/strata"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["terminationGracePeriodSeconds"] > _drain(container["args"]) + GRACEFUL_TIMEOUT_S
    service = compose()["services"]["strata"]
    assert seconds(service["stop_grace_period"]) > _drain(service["command"]) + GRACEFUL_TIMEOUT_S


def test_kubernetes_routes_by_health_and_never_restarts_a_draining_replica():
    docs = manifest()
    container = docs["Deployment/strata"]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert "httpGet" not in container["livenessProbe"]          # /health is 503 while draining
    headless = docs["Service/strata-replicas"]["spec"]
    assert headless["clusterIP"] == "None" and headless["selector"] == {"app": "strata"}
    env = {e["name"]: e.get("value") for e in
           docs["Deployment/strata-balancer"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STRATA_REPLICAS_DNS"].startswith("strata-replicas.")
    assert docs["Service/strata"]["spec"]["selector"] == {"app": "strata-balancer"}


def test_compose_balancer_resolves_the_replica_service():
    services = compose()["services"]
    assert services["balancer"]["environment"]["STRATA_REPLICAS_DNS"] == "strata"
    assert "strata" in services and services["strata"]["image"] == services["models"]["image"]


@pytest.mark.parametrize("name", ["STRATA_REPLICAS_DNS", "STRATA_REPLICA_PORT", "STRATA_MAX_REPLICAS",
                                  "STRATA_BALANCER_BIND"])
def test_the_config_reads_the_documented_variables(name):
    assert "${" + name + "-" in CONFIG.read_text()
