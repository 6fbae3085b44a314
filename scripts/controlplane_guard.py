"""Runs one Kubernetes control plane for one test process, and stops it when that process goes away.

Started by lake-testkit with a pipe on stdin and the directory of the binaries scripts/bootstrap
built (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl):

    controlplane_guard.py BIN_DIR

It starts etcd on a temp dir (no fsync), kube-apiserver on loopback (RBAC, a static admin token,
a generated service-account signing key, an audit log of every write), the controller manager
(garbage collection, Deployments -> ReplicaSets -> Pods, namespaces, service-account tokens, and
PersistentVolumes for claims as host directories under /tmp/hostpath_pv, the default
StorageClass `standard`) and the scheduler; registers one Node with the capacity and Ready condition a kubelet would report
(there is no kubelet: tests mark pods Ready themselves); then prints

    READY <kubeconfig> <apiserver url> <audit log>

and blocks on stdin. When the test process exits (however it exits), the pipe closes, stdin
reaches EOF, and every process is stopped and the temp dir and the volumes' directories removed:
nothing outlives the tests.
A start that fails prints "FAILED <why>" with the failing process's last log lines.
"""

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

TOKEN = "lake-test-admin"


# Ports the components listen on are chosen below the kernel's ephemeral range: a port the
# kernel hands out for `bind(0)` may be taken again, before the component binds it, as the source
# port of any outgoing connection (kubectl, the tests' clients) — which once failed a run with
# "address already in use". Below the range only another listener can collide.
_EPHEMERAL_LOW = 32768
_taken: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_LOW


def free_port() -> int:
    import random
    high = min(_ephemeral_low(), 65536)
    low = max(1024, high - 12000)
    for _ in range(200):
        port = random.randrange(low, high)
        if port in _taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError(f"no free port in [{low}, {high})")


def write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def service_account_key(tmp: str) -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = write(os.path.join(tmp, "sa.key"), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()).decode())
    public = write(os.path.join(tmp, "sa.pub"), key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())
    return private, public


class Plane:
    def __init__(self, bin_dir: str):
        self.bin = bin_dir
        self.tmp = tempfile.mkdtemp(prefix="lake-controlplane-")
        self.procs: list[tuple[str, subprocess.Popen, str]] = []
        # Set once the API server answers: stop() then removes the volumes provisioned.
        self.kubeconfig: str | None = None

    def start(self, name: str, *args: str) -> None:
        log = os.path.join(self.tmp, f"{name}.log")
        with open(log, "w") as out:
            proc = subprocess.Popen([os.path.join(self.bin, name), *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.procs.append((name, proc, log))

    def failed(self, why: str) -> None:
        lines = [f"FAILED {why}"]
        for name, proc, log in self.procs:
            with open(log, errors="replace") as f:
                tail = f.read().splitlines()[-15:]
            lines.append(f"--- {name} (exit {proc.poll()}):")
            lines.extend(tail)
        print("\n".join(lines), flush=True)
        self.stop()
        sys.exit(1)

    def check_alive(self) -> None:
        for name, proc, _ in self.procs:
            if proc.poll() is not None:
                self.failed(f"{name} exited")

    def wait_until(self, what: str, ready, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            self.check_alive()
            if time.monotonic() > deadline:
                self.failed(f"{what} not ready after {seconds:.0f} s")
            time.sleep(0.1)

    def remove_volumes(self) -> None:
        """The host directories of this plane's PersistentVolumes (outside its temp dir)."""
        if self.kubeconfig is None:
            return
        try:
            done = subprocess.run([os.path.join(self.bin, "kubectl"), "--kubeconfig",
                                   self.kubeconfig, "get", "pv", "--request-timeout=5s", "-o",
                                   "jsonpath={.items[*].spec.hostPath.path}"],
                                  capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return
        for path in done.stdout.split():
            if path.startswith("/tmp/hostpath_pv/") and ".." not in path:
                subprocess.run(["rm", "-rf", path], check=False)

    def stop(self) -> None:
        self.remove_volumes()
        self.kubeconfig = None
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _, proc, _ in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        subprocess.run(["rm", "-rf", self.tmp], check=False)


def get(url: str) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as response:
            return response.status
    except Exception:
        return 0


def main() -> None:
    plane = Plane(sys.argv[1])
    tmp = plane.tmp
    # A test process that dies mid-start must not leave anything behind either.
    signal.signal(signal.SIGTERM, lambda *_: (plane.stop(), sys.exit(0)))
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd = f"http://127.0.0.1:{etcd_port}"
    plane.start("etcd", "--data-dir", os.path.join(tmp, "etcd"), "--unsafe-no-fsync",
                "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
                "--log-level", "error")
    plane.wait_until("etcd", lambda: get(f"{etcd}/health") == 200, 30)

    sa_key, sa_pub = service_account_key(tmp)
    tokens = write(os.path.join(tmp, "tokens.csv"), f'{TOKEN},lake-test-admin,1,"system:masters"\n')
    # Every request that changes something, with its user: tests count the writes of a pass.
    policy = write(os.path.join(tmp, "audit-policy.yaml"), """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
""")
    audit = os.path.join(tmp, "audit.log")
    api = f"https://127.0.0.1:{api_port}"
    plane.start("kube-apiserver", "--etcd-servers", etcd, "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1", "--secure-port", str(api_port),
                # Loopback may not be a Service endpoint: nothing reconciles the kubernetes one.
                "--endpoint-reconciler-type", "none",
                "--cert-dir", os.path.join(tmp, "certs"), "--token-auth-file", tokens,
                "--authorization-mode", "RBAC", "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local", "--service-account-key-file", sa_pub,
                "--service-account-signing-key-file", sa_key,
                "--service-cluster-ip-range", "10.96.0.0/24", "--audit-policy-file", policy,
                "--audit-log-path", audit, "--audit-log-format", "json")
    plane.wait_until("kube-apiserver", lambda: get(f"{api}/readyz") == 200, 60)

    kubeconfig = write(os.path.join(tmp, "kubeconfig"), json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lake-test",
        "clusters": [{"name": "lake-test", "cluster": {"server": api, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin", "user": {"token": TOKEN}}],
        "contexts": [{"name": "lake-test", "context": {"cluster": "lake-test", "user": "admin"}}],
    }))
    plane.kubeconfig = kubeconfig
    plane.start("kube-controller-manager", "--kubeconfig", kubeconfig,
                "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                "--leader-elect=false", "--service-account-private-key-file", sa_key,
                "--root-ca-file", os.path.join(tmp, "certs", "apiserver.crt"),
                "--use-service-account-credentials=true",
                # PersistentVolumeClaims are provisioned as host directories (/tmp/hostpath_pv/…),
                # the controller manager's own provisioner for single-machine clusters.
                "--enable-hostpath-provisioner=true",
                # No kubelet heartbeats here: the node-lifecycle controller would taint the node and evict.
                "--controllers", "*,-node-ipam-controller,-node-lifecycle-controller")
    plane.start("kube-scheduler", "--kubeconfig", kubeconfig,
                "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
                "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                "--leader-elect=false")
    node = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "lake-test-node", "labels": {"kubernetes.io/hostname": "lake-test-node"}}})
    kubectl = os.path.join(plane.bin, "kubectl")

    def node_registered() -> bool:
        done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-"],
                              input=node, text=True, capture_output=True)
        return done.returncode == 0

    plane.wait_until("the node", node_registered, 30)
    # What a kubelet would report, so the scheduler binds pods to it (tests mark pods Ready).
    status = json.dumps({"status": {
        "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "1Ti"},
        "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "1Ti"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "lake test node (no kubelet)"}]}})
    done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "patch", "node", "lake-test-node",
                           "--subresource=status", "--type=merge", "-p", status],
                          capture_output=True, text=True)
    if done.returncode != 0:
        plane.failed(f"cannot set the node's status: {done.stderr}")
    # Admission taints a new node not-ready; the node-lifecycle controller (off: no kubelet
    # heartbeats) would lift it once the node reports Ready.
    subprocess.run([kubectl, "--kubeconfig", kubeconfig, "taint", "nodes", "lake-test-node",
                    "node.kubernetes.io/not-ready-"], capture_output=True)
    # The default ServiceAccount shows the controller manager's controllers run.
    plane.wait_until("the default service account", lambda: subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "get", "serviceaccount", "default", "-n", "default"],
        capture_output=True).returncode == 0, 60)
    # The default StorageClass, served by that provisioner; claims deleted delete their directory.
    storage_class = json.dumps({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {
            "storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate"})
    done = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-"],
                          input=storage_class, text=True, capture_output=True)
    if done.returncode != 0:
        plane.failed(f"cannot create the default StorageClass: {done.stderr}")
    print(f"READY {kubeconfig} {api} {audit}", flush=True)
    sys.stdin.read()
    plane.stop()


if __name__ == "__main__":
    main()
