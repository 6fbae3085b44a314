//! The node agent: a Node of the test control plane whose kubelet runs each Pod bound to it as
//! local processes (see [`crate::pod`] for what is emulated), executes their readiness probes and
//! writes Pod status back (phase, pod IP, Ready, restarts, exit codes), so Deployments, rollouts
//! and `kubectl wait` are real. A Pod being deleted has its processes stopped (SIGTERM, then
//! SIGKILL after its grace period, at most 10 s) and is then removed, as a kubelet confirms a
//! deletion. Dropping the agent stops every process it started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use crate::pod::{self, Launch, LaunchError, NodeSettings, PodInputs};

/// The IRSA annotation on a ServiceAccount (EKS).
mod process;
mod sync;

use process::{spawn, start, stop_pod};
use sync::run;

const ROLE_ARN: &str = "eks.amazonaws.com/role-arn";

struct RunningContainer {
    launch: Launch,
    child: Option<Child>,
    started_at: String,
    restarts: i32,
    exited: Option<(i32, Instant)>,
    last_exit: Option<i32>,
    ready: bool,
}

struct RunningPod {
    /// `Always`, `OnFailure` or `Never`.
    restart_policy: String,
    namespace: String,
    name: String,
    ip: String,
    dir: PathBuf,
    started_at: String,
    ready_since: String,
    containers: Vec<RunningContainer>,
    /// The last status sent, to send only changes.
    sent: Option<serde_json::Value>,
    /// Every web-identity token issued to this pod (tests compare what AWS saw).
    irsa_token: Option<String>,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, RunningPod>,
    /// Pods that could not start yet, and why (kept in their status).
    waiting: BTreeMap<String, String>,
    /// Namespaces whose pods reach another AWS than the node's (another emulator).
    aws_routes: BTreeMap<String, String>,
    next_ip: u32,
}

/// A running node agent. It runs on its own thread (with its own runtime and API client), so
/// one agent can serve every test of a binary; its processes die with the test process (each is
/// started with a parent-death signal). Dropping it stops every process.
pub struct NodeAgent {
    name: String,
    state: Arc<Mutex<State>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    root: tempfile::TempDir,
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("kube client")
}

/// Registers Node `name` (Ready, untainted, with room for many pods) and cordons every other
/// Node (no kubelet runs them).
async fn register(client: &kube::Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    for other in nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
    {
        let other = other.metadata.name.unwrap_or_default();
        if other != name {
            nodes.cordon(&other).await.expect("cordon");
        }
    }
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .expect("node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("registering Node {name}: {e}"),
    }
    let capacity =
        json!({"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "1Ti"});
    let status = json!({"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "lake-e2e node agent", "lastHeartbeatTime": now(),
            "lastTransitionTime": now()}],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "nodeInfo": {"kubeletVersion": "v1.37.2", "machineID": "", "systemUUID": "",
            "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "lake-e2e://1",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
    // The API server taints a new Node not-ready; its (absent) lifecycle controller would lift it.
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": null}})),
        )
        .await
        .expect("node taints");
}

impl NodeAgent {
    /// Registers Node `name` on the API server of `kubeconfig` and starts running the Pods bound
    /// to it. Returns once the Node is registered.
    pub fn start(kubeconfig: &Path, name: &str, mut settings: NodeSettings) -> Self {
        let state = Arc::new(Mutex::new(State {
            next_ip: 0,
            ..State::default()
        }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let root = tempfile::tempdir().expect("agent dir");
        // Containers run as their pods' users: they must reach their pods' directories.
        std::fs::set_permissions(
            root.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .expect("agent dir mode");
        // … and their images' binaries, which may lie under a directory only root may enter
        // (`/root/.cache`): the agent's own directory holds them (linked, or copied).
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).expect("agent bin dir");
        for image in ["lake", "lake-operator"] {
            let from = settings.binaries.join(image);
            let to = bin.join(image);
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to)
                    .unwrap_or_else(|e| panic!("cannot copy {}: {e}", from.display()));
            }
        }
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("agent bin dir mode");
        settings.binaries = bin;
        let (registered, wait) = std::sync::mpsc::channel();
        let (kubeconfig, node, dir) = (
            kubeconfig.to_owned(),
            name.to_owned(),
            root.path().to_owned(),
        );
        let (thread_state, thread_stop) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("node-agent-{name}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("agent runtime");
                runtime.block_on(async move {
                    let client = client_for(&kubeconfig).await;
                    register(&client, &node).await;
                    let _ = registered.send(());
                    run(client, node, settings, dir, thread_state, thread_stop).await;
                });
            })
            .expect("agent thread");
        wait.recv()
            .expect("the node agent failed to register its Node");
        Self {
            name: name.to_owned(),
            state,
            stop,
            root,
        }
    }

    pub fn node_name(&self) -> &str {
        &self.name
    }

    /// Pods of `namespace` reach AWS at `endpoint` (`AWS_ENDPOINT_URL`), not the node's default:
    /// a test with an emulator of its own (e.g. with IAM enforcement).
    pub fn route_aws(&self, namespace: &str, endpoint: &str) {
        self.state
            .lock()
            .expect("agent state")
            .aws_routes
            .insert(namespace.to_owned(), endpoint.to_owned());
    }

    /// The output of every container of every pod named `namespace/pod` so far (for failure
    /// messages).
    pub fn logs(&self, namespace: &str, pod: &str) -> String {
        let dir = self.root.path().join(namespace).join(pod);
        let mut out = String::new();
        for incarnation in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for entry in std::fs::read_dir(incarnation.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "log") {
                    out.push_str(&format!("--- {}\n", path.display()));
                    out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                }
            }
        }
        out
    }

    /// The web-identity token the agent gave `namespace/pod`, if its ServiceAccount has a role.
    pub fn irsa_token(&self, namespace: &str, pod: &str) -> Option<String> {
        let state = self.state.lock().expect("agent state");
        state
            .pods
            .values()
            .find(|p| p.namespace == namespace && p.name == pod)
            .and_then(|p| p.irsa_token.clone())
    }

    /// Runs `args` in the first container of `namespace/pod` as `kubectl exec` would: the same
    /// program, environment, files and pod IP, in the pod's directory. Waits for it to finish.
    pub fn exec(&self, namespace: &str, pod: &str, args: &[&str]) -> std::process::Output {
        let (launch, dir) = {
            let state = self.state.lock().expect("agent state");
            let running = state
                .pods
                .values()
                .find(|p| p.namespace == namespace && p.name == pod)
                .unwrap_or_else(|| panic!("pod {namespace}/{pod} does not run on this node"));
            (running.containers[0].launch.clone(), running.dir.clone())
        };
        let mut command = Command::new(&launch.program);
        process::as_the_container(&mut command, &launch.identity);
        command
            .args(args)
            .env_clear()
            .envs(&launch.env)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("exec in the pod")
    }

    /// The process ids of a pod's running containers.
    pub fn pids(&self, namespace: &str, pod: &str) -> Vec<u32> {
        let state = self.state.lock().expect("agent state");
        state
            .pods
            .values()
            .filter(|p| p.namespace == namespace && p.name == pod)
            .flat_map(|p| p.containers.iter())
            .filter_map(|c| c.child.as_ref().map(std::process::Child::id))
            .collect()
    }

    /// How many processes the agent is running now.
    pub fn running(&self) -> usize {
        let mut state = self.state.lock().expect("agent state");
        state
            .pods
            .values_mut()
            .flat_map(|p| p.containers.iter_mut())
            .filter_map(|c| c.child.as_mut())
            .map(|child| matches!(child.try_wait(), Ok(None)))
            .filter(|running| *running)
            .count()
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut state) = self.state.lock() {
            for pod in state.pods.values_mut() {
                for c in &mut pod.containers {
                    if let Some(child) = c.child.as_mut() {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            }
        }
    }
}
