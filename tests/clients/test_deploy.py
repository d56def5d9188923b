"""deploy/ checked as far as this machine allows (issue 27): every
Kubernetes file parses, is of a kind we ship and refers only to what the
others define; the ConfigMap's manifest passes `toolhost check`; the HAProxy
configuration passes `haproxy -c`. (Building the image and applying the
files to a cluster cannot be done here: see docs/deploy.md.)

Run in the LangGraph venv, which has PyYAML.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from conftest import ROOT

K8S = ROOT / "deploy/k8s"
KINDS = {
    ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("apps/v1", "Deployment"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"), ("networking.k8s.io/v1", "NetworkPolicy"),
}


def documents() -> list[dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


def named(kind: str, name: str) -> dict:
    found = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"one {kind} {name} expected, found {len(found)}"
    return found[0]


def test_every_kubernetes_file_is_listed_and_of_a_kind_we_ship() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    for doc in documents():
        assert (doc["apiVersion"], doc["kind"]) in KINDS, doc["kind"]
        assert doc["metadata"]["name"].startswith("toolhost")


def test_every_secret_key_a_container_reads_is_in_the_secret() -> None:
    secret = named("Secret", "toolhost-secrets")["stringData"]
    for deployment in (d for d in documents() if d["kind"] == "Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "toolhost-secrets" and ref["key"] in secret, env


def test_redis_takes_a_password_and_only_toolhost_may_reach_it() -> None:
    secret = named("Secret", "toolhost-secrets")["stringData"]
    password = secret["REDIS_PASSWORD"]
    assert f":{password}@toolhost-redis:" in secret["REDIS_URL"], "REDIS_URL must carry REDIS_PASSWORD"
    redis = named("Deployment", "toolhost-redis")["spec"]["template"]["spec"]["containers"][0]
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    policy = named("NetworkPolicy", "toolhost-redis")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "toolhost-redis"}
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolhost"}}}]


def test_the_configmaps_manifest_passes_toolhost_check(toolhost: Path, tmp_path: Path) -> None:
    text = named("ConfigMap", "toolhost-manifest")["data"]["toolhost.toml"]
    # The image's tools are this checkout's; its Redis is one nobody needs
    # to reach for a check.
    manifest = tmp_path / "toolhost.toml"
    manifest.write_text(text.replace("/srv/toolhost/tools/", f"{ROOT}/target/tools/"))
    secret = named("Secret", "toolhost-secrets")["stringData"]
    env = {**os.environ, **secret}
    result = subprocess.run([str(toolhost), "--config", str(manifest), "check"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_haproxy_configuration_is_valid() -> None:
    assert shutil.which("haproxy"), "haproxy is not installed: scripts/setup.sh installs it"
    result = subprocess.run(["haproxy", "-c", "-f", str(ROOT / "deploy/haproxy.cfg")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
