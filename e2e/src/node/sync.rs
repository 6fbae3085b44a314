//! The agent's loop and one pass over one pod: what a kubelet does — start it, probe it,
//! restart or finish its containers, report its status, stop it when it is deleted.

use super::*;

pub(super) async fn run(
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

pub(super) async fn sync_pod(
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
pub(super) fn restarts(policy: &str, code: i32) -> bool {
    policy == "Always" || (policy == "OnFailure" && code != 0)
}

pub(super) fn pod_status(pod: &RunningPod) -> serde_json::Value {
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
