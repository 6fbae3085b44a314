"""A client that keeps querying through a rollout: usage rollout_client.py NAMESPACE SELECTOR TOKEN STOP_FILE.

Like a client behind a Service, each query goes to one of the ready pods (read from the API with
kubectl, as kube-proxy follows the endpoints); a connection to a pod that went away is retried
on another ready pod. Runs until STOP_FILE exists, then prints one JSON line: queries answered,
queries that no ready pod answered, retries, and the pods that answered."""

import json
import os
import random
import subprocess
import sys
import time

import adbc_driver_manager

from lake_e2e import connect

NAMESPACE, SELECTOR, TOKEN, STOP = sys.argv[1:5]
KUBECTL = os.environ["KUBECTL"]
SCHEME = os.environ.get("LAKE_E2E_SCHEME", "grpc+tls")


def ready_pods():
    out = subprocess.run(
        [KUBECTL, "get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json"],
        check=True, capture_output=True, text=True).stdout
    pods = []
    for pod in json.loads(out)["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        status = pod.get("status", {})
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        if ready and status.get("podIP"):
            pods.append((pod["metadata"]["name"], status["podIP"]))
    return pods


answered, unanswered, retries = 0, [], 0
served = {}
while not os.path.exists(STOP):
    pods = ready_pods()
    random.shuffle(pods)
    for attempt, (name, ip) in enumerate(pods):
        try:
            with connect(f"{SCHEME}://{ip}:8815", TOKEN) as conn:
                with conn.cursor() as cur:
                    cur.execute("SELECT count(*) FROM sales.orders")
                    rows = cur.fetchall()
            if rows != [(1000,)]:
                raise AssertionError(f"{name} answered {rows}")
            answered += 1
            served[name] = served.get(name, 0) + 1
            break
        except adbc_driver_manager.Error as e:
            retries += 1
            last = f"{name} ({ip}): {e}"
    else:
        unanswered.append(last if pods else "no ready pod")
    time.sleep(0.05)

print(json.dumps({"answered": answered, "unanswered": unanswered, "retries": retries, "served": served}))
