#!/usr/bin/python3
"""The pod template of each Job in a Kubernetes YAML stream, as a Pod named after its Job, for
`podman kube play` (podman 4.3 plays no Job: docs/deploy.md, "podman kube play").

  containers/podman/job-pod.py < memif-test.yaml > roce-bench.yaml
"""
import sys

import yaml

jobs = [o for o in yaml.safe_load_all(sys.stdin) if o and o.get("kind") == "Job"]
if not jobs:
    sys.exit("job-pod: no Job in the input")
pods = []
for job in jobs:
    template = job["spec"]["template"]
    labels = (template.get("metadata") or {}).get("labels", {})
    pods.append({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": job["metadata"]["name"], "labels": labels},
                 "spec": template["spec"]})
yaml.safe_dump_all(pods, sys.stdout, sort_keys=False)
