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
    let capacity = json!({"cpu": "1000", "memory": "4Ti", "pods": "1000"});
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
    pub fn start(kubeconfig: &Path, name: &str, settings: NodeSettings) -> Self {
        let state = Arc::new(Mutex::new(State {
            next_ip: 0,
            ..State::default()
        }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let root = tempfile::tempdir().expect("agent dir");
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
        Command::new(&launch.program)
            .args(args)
            .env_clear()
            .envs(&launch.env)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("exec in the pod")
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

async fn run(
    client: kube::Client,
    node: String,
    settings: NodeSettings,
    root: PathBuf,
    state: Arc<Mutex<State>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        match pods.list(&on_node).await {
            Ok(list) => {
                let seen: Vec<String> = list
                    .items
                    .iter()
                    .filter_map(|p| p.metadata.uid.clone())
                    .collect();
                for pod in list.items {
                    sync_pod(&client, &settings, &root, &state, pod).await;
                }
                // Gone from the API (force-deleted): stop what still runs.
                let gone: Vec<RunningPod> = {
                    let mut state = state.lock().expect("agent state");
                    let uids: Vec<String> = state
                        .pods
                        .keys()
                        .filter(|uid| !seen.contains(uid))
                        .cloned()
                        .collect();
                    uids.iter().filter_map(|u| state.pods.remove(u)).collect()
                };
                for mut pod in gone {
                    stop_pod(&mut pod, 0).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "node agent: listing pods"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn sync_pod(
    client: &kube::Client,
    settings: &NodeSettings,
    root: &Path,
    state: &Arc<Mutex<State>>,
    pod: Pod,
) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);

    if pod.metadata.deletion_timestamp.is_some() {
        let running = state.lock().expect("agent state").pods.remove(&uid);
        if let Some(mut running) = running {
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30)
                .clamp(0, 10) as u64;
            stop_pod(&mut running, grace).await;
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &params).await;
        return;
    }

    let tracked = state.lock().expect("agent state").pods.contains_key(&uid);
    if !tracked {
        let ip = {
            let mut state = state.lock().expect("agent state");
            let n = state.next_ip;
            state.next_ip += 1;
            format!("127.0.{}.{}", n / 250, n % 250 + 2)
        };
        // Per pod uid, as a kubelet keeps it: a replacement of the same name (a StatefulSet's)
        // starts with fresh emptyDirs; only a claim outlives the pod.
        let dir = root.join(&namespace).join(&name).join(&uid);
        let mut settings = settings.clone();
        if let Some(endpoint) = state
            .lock()
            .expect("agent state")
            .aws_routes
            .get(&namespace)
        {
            settings.aws_endpoint = Some(endpoint.clone());
        }
        match start(client, &settings, &pod, &dir, &ip).await {
            Ok((containers, irsa_token)) => {
                let started_at = now();
                let running = RunningPod {
                    restart_policy: pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.restart_policy.clone())
                        .unwrap_or_else(|| "Always".into()),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    ip,
                    dir,
                    ready_since: started_at.clone(),
                    started_at,
                    containers,
                    sent: None,
                    irsa_token,
                };
                let mut state = state.lock().expect("agent state");
                state.waiting.remove(&uid);
                state.pods.insert(uid.clone(), running);
            }
            Err(e) => {
                let reason = match e {
                    LaunchError::Image(_) => "ErrImagePull",
                    _ => "CreateContainerConfigError",
                };
                let message = e.to_string();
                let changed = {
                    let mut state = state.lock().expect("agent state");
                    state.waiting.insert(uid.clone(), message.clone()) != Some(message.clone())
                };
                if changed {
                    let containers: Vec<_> = pod
                        .spec
                        .iter()
                        .flat_map(|s| s.containers.iter())
                        .map(|c| {
                            json!({"name": c.name, "image": c.image, "imageID": "",
                            "ready": false, "restartCount": 0,
                            "state": {"waiting": {"reason": reason, "message": message}}})
                        })
                        .collect();
                    let status =
                        json!({"status": {"phase": "Pending", "containerStatuses": containers}});
                    let _ = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
                        .await;
                }
                return;
            }
        }
    }

    // Processes: restart what exited (restartPolicy Always), probe readiness.
    let status = {
        let mut state = state.lock().expect("agent state");
        let Some(running) = state.pods.get_mut(&uid) else {
            return;
        };
        let restart = running.restart_policy.clone();
        for c in &mut running.containers {
            if let Some(child) = c.child.as_mut()
                && let Ok(Some(exit)) = child.try_wait()
            {
                let code = exit.code().unwrap_or(137);
                c.child = None;
                c.exited = Some((code, Instant::now()));
                c.last_exit = Some(code);
                c.ready = false;
            }
            if let Some((code, at)) = c.exited
                && restarts(&restart, code)
                && at.elapsed() > Duration::from_secs(1)
            {
                match spawn(&c.launch, &running.dir) {
                    Ok(child) => {
                        c.child = Some(child);
                        c.exited = None;
                        c.restarts += 1;
                        c.started_at = now();
                    }
                    Err(e) => tracing::warn!(error = %e, "node agent: restarting"),
                }
            }
            let was = c.ready;
            c.ready = c.child.is_some()
                && c.launch.ready_port.is_none_or(|port| {
                    let addr = format!("{}:{port}", running.ip);
                    addr.parse()
                        .ok()
                        .and_then(|a| {
                            std::net::TcpStream::connect_timeout(&a, Duration::from_millis(100))
                                .ok()
                        })
                        .is_some()
                });
            if was != c.ready {
                running.ready_since = now();
            }
        }
        let status = pod_status(running);
        if running.sent.as_ref() == Some(&status) {
            None
        } else {
            running.sent = Some(status.clone());
            Some(status)
        }
    };
    if let Some(status) = status
        && let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
            .await
    {
        tracing::warn!(error = %e, pod = %name, "node agent: pod status");
        if let Some(running) = state.lock().expect("agent state").pods.get_mut(&uid) {
            running.sent = None;
        }
    }
}

/// Whether a container that exited with `code` is started again under `policy`.
fn restarts(policy: &str, code: i32) -> bool {
    policy == "Always" || (policy == "OnFailure" && code != 0)
}

fn pod_status(pod: &RunningPod) -> serde_json::Value {
    let ready = pod.containers.iter().all(|c| c.ready);
    let word = |b: bool| if b { "True" } else { "False" };
    // Exited for good (a Job's pod): the container is terminated, and once all are, the pod
    // has Succeeded (every exit 0) or Failed.
    let finished = |c: &RunningContainer| {
        c.exited
            .filter(|(code, _)| !restarts(&pod.restart_policy, *code))
            .map(|(code, _)| code)
    };
    let phase = if pod.containers.iter().all(|c| finished(c).is_some()) {
        if pod.containers.iter().all(|c| finished(c) == Some(0)) {
            "Succeeded"
        } else {
            "Failed"
        }
    } else {
        "Running"
    };
    let containers: Vec<_> = pod
        .containers
        .iter()
        .map(|c| {
            // Strategic merge keeps keys a patch leaves out: the other states are sent as null.
            let state = match (&c.child, finished(c)) {
                (Some(_), _) => json!({"running": {"startedAt": c.started_at},
                    "waiting": null, "terminated": null}),
                (None, Some(code)) => json!({"running": null, "waiting": null,
                    "terminated": {"exitCode": code, "startedAt": c.started_at,
                        "reason": if code == 0 { "Completed" } else { "Error" }}}),
                (None, None) => json!({"running": null,
                    "waiting": {"reason": "CrashLoopBackOff"}, "terminated": null}),
            };
            let last = c.last_exit.map(|code| {
                json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }}})
            });
            json!({"name": c.launch.container, "image": "", "imageID": "",
                "ready": c.ready, "started": c.child.is_some(), "restartCount": c.restarts,
                "state": state, "lastState": last.unwrap_or_else(|| json!({}))})
        })
        .collect();
    json!({"status": {
        "phase": phase,
        "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": pod.ip, "podIPs": [{"ip": pod.ip}],
        "startTime": pod.started_at,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": pod.started_at},
            {"type": "Initialized", "status": "True", "lastTransitionTime": pod.started_at},
            {"type": "ContainersReady", "status": word(ready), "lastTransitionTime": pod.ready_since},
            {"type": "Ready", "status": word(ready), "lastTransitionTime": pod.ready_since},
        ],
        "containerStatuses": containers,
    }})
}

/// Fetches what the pod refers to, writes its files and starts its containers.
async fn start(
    client: &kube::Client,
    settings: &NodeSettings,
    pod: &Pod,
    dir: &Path,
    ip: &str,
) -> Result<(Vec<RunningContainer>, Option<String>), LaunchError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let account = spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());

    let mut inputs = PodInputs::default();
    let mut config_map_names = Vec::new();
    let mut secret_names = Vec::new();
    for volume in spec.volumes.iter().flatten() {
        if let Some(cm) = &volume.config_map {
            config_map_names.push(cm.name.clone());
        }
        if let Some(s) = &volume.secret {
            secret_names.push(s.secret_name.clone().unwrap_or_default());
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            if let Some(cm) = &source.config_map {
                config_map_names.push(cm.name.clone());
            }
            if let Some(token) = &source.service_account_token {
                let issued = token_for(
                    &accounts,
                    &account,
                    token.audience.clone(),
                    token.expiration_seconds,
                    pod,
                )
                .await?;
                inputs
                    .projected_tokens
                    .insert((volume.name.clone(), token.path.clone()), issued);
            }
        }
    }
    for c in &spec.containers {
        for from in c.env_from.iter().flatten() {
            if let Some(cm) = &from.config_map_ref {
                config_map_names.push(cm.name.clone());
            }
            if let Some(s) = &from.secret_ref {
                secret_names.push(s.name.clone());
            }
        }
        for var in c.env.iter().flatten() {
            if let Some(from) = &var.value_from {
                if let Some(r) = &from.config_map_key_ref {
                    config_map_names.push(r.name.clone());
                }
                if let Some(r) = &from.secret_key_ref {
                    secret_names.push(r.name.clone());
                }
            }
        }
    }
    for name in config_map_names {
        if let Ok(Some(cm)) = config_maps.get_opt(&name).await {
            inputs.config_maps.insert(name, cm.data.unwrap_or_default());
        }
    }
    for name in secret_names {
        if let Ok(Some(secret)) = secrets.get_opt(&name).await {
            let data = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            inputs.secrets.insert(name, data);
        }
    }
    let role = accounts
        .get_opt(&account)
        .await
        .ok()
        .flatten()
        .and_then(|sa| sa.metadata.annotations)
        .and_then(|a| a.get(ROLE_ARN).cloned());
    let mut irsa_token = None;
    if let Some(role) = role {
        let token = token_for(
            &accounts,
            &account,
            Some("sts.amazonaws.com".into()),
            Some(3600),
            pod,
        )
        .await?;
        irsa_token = Some(token.clone());
        inputs.irsa = Some((role, token));
    }

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for volume in spec.volumes.iter().flatten() {
        let Some(claim) = &volume.persistent_volume_claim else {
            continue;
        };
        // Bound: the claim names its volume and the volume its host directory. Not yet: the
        // pod waits (its launch fails naming the claim, and is tried again).
        let bound = claims
            .get_opt(&claim.claim_name)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.spec?.volume_name);
        let Some(name) = bound else {
            continue;
        };
        let path = volumes
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|v| Some(v.spec?.host_path?.path));
        if let Some(path) = path {
            inputs
                .claims
                .insert(claim.claim_name.clone(), PathBuf::from(path));
        }
    }
    let launches = pod::launches(pod, &inputs, settings, dir, ip)?;
    let mut containers = Vec::new();
    for launch in launches {
        for d in &launch.dirs {
            std::fs::create_dir_all(dir.join(d))
                .map_err(|e| LaunchError::Unsupported(e.to_string()))?;
        }
        for f in &launch.files {
            write_file(&dir.join(&f.path), &f.contents, f.mode)
                .map_err(|e| LaunchError::Unsupported(e.to_string()))?;
        }
        let child = spawn(&launch, dir).map_err(|e| LaunchError::Unsupported(e.to_string()))?;
        containers.push(RunningContainer {
            launch,
            child: Some(child),
            started_at: now(),
            restarts: 0,
            exited: None,
            last_exit: None,
            ready: false,
        });
    }
    Ok((containers, irsa_token))
}

async fn token_for(
    accounts: &Api<ServiceAccount>,
    account: &str,
    audience: Option<String>,
    seconds: Option<i64>,
    pod: &Pod,
) -> Result<String, LaunchError> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: audience.map(|a| vec![a]),
            expiration_seconds: seconds.or(Some(3600)),
            bound_object_ref: Some(k8s_openapi::api::authentication::v1::BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .map_err(|e| LaunchError::Missing {
            kind: "ServiceAccount token",
            name: format!("{account}: {e}"),
        })?;
    Ok(issued.status.and_then(|s| s.token).unwrap_or_default())
}

fn write_file(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, contents)?;
    // Owner-readable at least: the agent runs every pod as its own user.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o400))
}

fn spawn(launch: &Launch, dir: &Path) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", launch.container)))?;
    let mut command = Command::new(&launch.program);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec. The process
    // is killed when the agent's thread ends — with the test process — so none outlives it.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
}

/// SIGTERM, up to `grace` seconds, then SIGKILL.
async fn stop_pod(pod: &mut RunningPod, grace: u64) {
    for c in &mut pod.containers {
        let Some(child) = c.child.as_mut() else {
            continue;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(grace);
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        c.child = None;
    }
}
