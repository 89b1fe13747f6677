#!/usr/bin/env python3
"""The chart's values against what it renders (scripts/check-deploy runs it).

1. Every values key renders into something: changed, it changes the output of at least
   one shape. A key that renders into nothing fails.
2. Every config key of docs/configuration.md can be set through values.config and lands
   in the rendered outbox-router.toml under its section; the keys the chart owns are
   refused in values.config and rendered by the chart in the shapes they belong to.

3. NOTES.txt renders in every shape, and the repair pod it gives (`kubectl run
   --overrides`) decodes strictly as a Kubernetes Pod (VALIDATOR) with the chart's
   config, volume and secrets.

    deploy/helm/check-values.py HELM CHART_DIR VALIDATOR
"""
import copy
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

import yaml

HELM, CHART, VALIDATOR = sys.argv[1], sys.argv[2], sys.argv[3]
POOL_SOURCE = {"source": {"user": "cdc", "server_id": 61}, "outbox": {"tables": ["orders.outbox"]}}
POOL = {"mode": "pool", "config": {"source": None, "outbox": None},
        "pool": {"sources": {"orders": POOL_SOURCE}}}
SHAPES = [
    {"mode": "single"},
    {"mode": "single", "exactlyOnce": True},
    # The monitor over TLS: the probes and the ServiceMonitor use https.
    {"mode": "standby", "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
     "config": {"monitor": {"tls": {"cert_file": "/etc/m/tls.crt", "key_file": "/etc/m/tls.key"}}}},
    POOL,
]
# The keys the chart sets, and in which shapes (ALO: at-least-once single).
OWNED = {
    ("checkpoint", "dir"): {"ALO", "EOS", "standby"},
    ("checkpoint", "name"): {"ALO"},
    ("monitor", "listen"): {"ALO", "EOS", "standby"},
    ("delivery", "mode"): {"EOS", "standby"},
    ("delivery", "transactional_id"): {"EOS", "standby"},
    ("ha", "enabled"): {"standby"},
}
SHAPE_NAMES = ["ALO", "EOS", "standby", "pool"]
problems = []


def merge(base, extra):
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v
    return base


def render(values, check=True):
    out = subprocess.run(
        [HELM, "template", "router", CHART, "-f", "-"],
        input=json.dumps(values), capture_output=True, text=True)
    if check and out.returncode != 0:
        sys.exit(f"helm template failed: {out.stderr}")
    return out


def rendered_toml(values, key="outbox-router.toml"):
    for doc in yaml.safe_load_all(render(values).stdout):
        if doc and doc.get("kind") == "ConfigMap" and key in doc["data"]:
            return tomllib.loads(doc["data"][key])
    sys.exit(f"no ConfigMap with {key} rendered")


defaults = yaml.safe_load(open(f"{CHART}/values.yaml"))

# 1. Every values key renders into something.
def leaves(tree, path=()):
    for k, v in tree.items():
        if k == "config" or path + (k,) == ("pool", "sources"):
            continue  # free-form: checked key by key below
        if isinstance(v, dict):
            yield from leaves(v, path + (k,))
        else:
            yield path + (k,), v


def changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return value + [copy.deepcopy(value[0])] if value else [{"name": "x"}]
    return f"{value}x" if value else "x"


def with_value(shape, path, value):
    values = copy.deepcopy(shape)
    at = values
    for k in path[:-1]:
        at = at.setdefault(k, {})
    at[path[-1]] = value
    return values


# Every top-level key says what it is: a comment right above it.
lines = open(f"{CHART}/values.yaml").read().splitlines()
for i, line in enumerate(lines):
    if re.match(r"^[A-Za-z]\w*:", line) and not (i and lines[i - 1].startswith("#")):
        problems.append(f"values.yaml: {line.split(':')[0]} has no comment above it")

baseline = [render(s).stdout for s in SHAPES]
for path, value in leaves(defaults):
    if path == ("mode",):
        continue  # the shapes themselves
    new = changed(value)
    if path == ("secretEnv",):
        new = value + [{"name": "EXTRA", "secret": "s", "key": "k"}]
    if not any(render(with_value(s, path, new)).stdout != base for s, base in zip(SHAPES, baseline)):
        problems.append(f"values key {'.'.join(path)} renders into nothing in any shape")

# 2. Every config key can be set, and the owned ones are the chart's.
doc = open("docs/configuration.md").read()
keys = []
for section, body in re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", doc, re.S | re.M):
    path = () if section == "Top level" else tuple(section.strip("[]").split("."))
    for key in re.findall(r"^\| `([a-z_]+)` \|", body, re.M):
        keys.append((path, key))
# A key that is a section of its own ([kafka.topics], [value.registry]) is checked by its keys.
sections = {path for path, _ in keys}
keys = [(p, k) for p, k in keys if p + (k,) not in sections and not (p + (k,) == ("kafka", "topics", "rule"))]
if len(keys) < 50:
    sys.exit(f"read only {len(keys)} keys from docs/configuration.md")

values_config = {}
for path, key in keys:
    if path + (key,) in OWNED:
        continue
    at = values_config
    for i, part in enumerate(path):
        if part == "rule":  # [[kafka.topics.rule]]: an array of tables
            at = at.setdefault("rule", [{}])[0]
        else:
            at = at.setdefault(part, {})
    at.setdefault(key, f"set-{'.'.join(path + (key,))}")
# A pool: the shared sections through values.config into the pool file, every other
# section through pool.sources.NAME into the source's file; the chart's keys refused.
POOL_SHARED = {"kafka", "monitor"}
POOL_OWNED = {("checkpoint", "dir"), ("checkpoint", "name"), ("monitor", "listen"),
              ("delivery", "mode"), ("delivery", "transactional_id")}
shared = {k: v for k, v in values_config.items() if k in POOL_SHARED}
own = {k: v for k, v in values_config.items() if k not in POOL_SHARED and k != "ha"}
pool_values = merge(copy.deepcopy(POOL), {"config": shared, "pool": {"sources": {"orders": own}}})
files = {"pool": rendered_toml(pool_values), "source": rendered_toml(pool_values, "orders.toml")}
for path, key in keys:
    if path[:1] == ("ha",):
        continue  # a pool's group replaces [ha]: refused below
    if path + (key,) in POOL_OWNED:
        continue
    at = files["pool" if path[0] in POOL_SHARED else "source"] if path else files["source"]
    for part in path:
        at = at.get(part, {})
        if isinstance(at, list):
            at = at[0]
    if at.get(key) != f"set-{'.'.join(path + (key,))}":
        problems.append(f"pool: config key {'.'.join(path + (key,))} set through values is not rendered")
if files["source"]["delivery"] != {"mode": "exactly-once", "transactional_id": "router-outbox-router-orders", **{k: v for k, v in own.get("delivery", {}).items()}}:
    problems.append(f"pool: the source's delivery is not the chart's exactly-once: {files['source']['delivery']}")
for section, key in sorted(POOL_OWNED) + [("ha", "enabled")]:
    where = {"config": {section: {key: "x"}}} if section in POOL_SHARED else {"pool": {"sources": {"orders": {section: {key: "x"}}}}}
    out = render(merge(copy.deepcopy(POOL), where), check=False)
    if out.returncode == 0:
        problems.append(f"pool: {section}.{key} set through values is not refused (the chart sets it)")

for shape, name in zip(SHAPES[:3], SHAPE_NAMES[:3]):
    toml = rendered_toml(merge(copy.deepcopy(shape), {"config": values_config}))
    for path, key in keys:
        at = toml
        for part in path:
            at = at.get(part, {})
            if isinstance(at, list):
                at = at[0]
        if path + (key,) in OWNED:
            if (name in OWNED[path + (key,)]) != (key in at):
                problems.append(f"{name}: the chart {'does not set' if key not in at else 'sets'} {'.'.join(path + (key,))}")
        elif at.get(key) != f"set-{'.'.join(path + (key,))}":
            problems.append(f"{name}: config key {'.'.join(path + (key,))} set in values.config is not rendered")
for (section, key) in OWNED:
    out = render({"config": {section: {key: "x"}}}, check=False)
    if out.returncode == 0 or "is set by the chart" not in out.stderr:
        problems.append(f"values.config.{section}.{key} is not refused (the chart sets it)")

# 3. NOTES.txt: `helm template` leaves it out, so a copy of the chart prints it.
with tempfile.TemporaryDirectory() as tmp:
    chart = shutil.copytree(CHART, f"{tmp}/chart")
    shutil.copy(f"{chart}/templates/NOTES.txt", f"{chart}/files/NOTES.txt")
    with open(f"{chart}/templates/notes.yaml", "w") as f:
        f.write('notes: {{ tpl (.Files.Get "files/NOTES.txt") . | toJson }}\n')
    for shape, name in zip(SHAPES, SHAPE_NAMES):
        out = subprocess.run([HELM, "template", "router", chart, "-f", "-", "--show-only", "templates/notes.yaml"],
                             input=json.dumps(shape), capture_output=True, text=True)
        if out.returncode != 0:
            problems.append(f"{name}: NOTES.txt does not render: {out.stderr}")
            continue
        notes = yaml.safe_load(out.stdout)["notes"]
        m = re.search(r"--overrides='(.*?)'", notes)
        if not m:
            problems.append(f"{name}: NOTES.txt gives no repair pod")
            continue
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "repair"}, **json.loads(m.group(1))}
        check = subprocess.run([VALIDATOR], input=json.dumps(pod), capture_output=True, text=True)
        if check.returncode != 0:
            problems.append(f"{name}: NOTES.txt's repair pod is not a valid Pod: {check.stdout}{check.stderr}")
        (c,) = pod["spec"]["containers"]
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        if not {"/etc/outbox-router", "/var/lib/outbox-router"} <= mounts or "OUTBOX_DB_PASSWORD" not in str(c["env"]):
            problems.append(f"{name}: NOTES.txt's repair pod lacks the config, the volume or the secrets")

if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"values: {sum(1 for _ in leaves(defaults))} keys render; {len(keys)} config keys settable through values.config, {len(OWNED)} set by the chart")
