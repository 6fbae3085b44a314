//! A pod's containers as processes: started with their volumes, identity and environment;
//! stopped with SIGTERM, then killed after the grace period.

use super::*;

/// Fetches what the pod refers to, writes its files and starts its containers.
pub(super) async fn start(
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

pub(super) async fn token_for(
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

pub(super) fn write_file(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, contents)?;
    // Owner-readable at least: the agent runs every pod as its own user.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o400))
}

pub(super) fn spawn(launch: &Launch, dir: &Path) -> std::io::Result<Child> {
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
pub(super) async fn stop_pod(pod: &mut RunningPod, grace: u64) {
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
