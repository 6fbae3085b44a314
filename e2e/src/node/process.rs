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
    let io = |what: &str, path: &Path| {
        let what = format!("{what} {}", path.display());
        move |e: std::io::Error| LaunchError::Unsupported(format!("{what}: {e}"))
    };
    // The container's user must reach its working directory (it does not own it).
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    set_mode(dir, 0o711).map_err(io("set the mode of", dir))?;
    let mut containers = Vec::new();
    for launch in launches {
        let group = launch.identity.fs_group;
        for d in &launch.dirs {
            // Volumes are the pod's group's (fsGroup), writable like a kubelet's emptyDir.
            let path = dir.join(d);
            std::fs::create_dir_all(&path).map_err(io("create", &path))?;
            own(&path, group, 0o777).map_err(io("own", &path))?;
            if let Some(parent) = path.parent() {
                set_mode(parent, 0o755).map_err(io("set the mode of", parent))?;
            }
        }
        for f in &launch.files {
            // The mode the pod asked for, no more: the file is the agent's, its group the pod's.
            let path = dir.join(&f.path);
            write_file(&path, &f.contents).map_err(io("write", &path))?;
            // A file only its owner may read (a projected token, 0600) is the container
            // user's, as the kubelet makes it.
            let user = (f.mode & 0o077 == 0).then_some(launch.identity.uid);
            own_as(&path, user, group, f.mode).map_err(io("own", &path))?;
        }
        // A claim's volume, as a storage driver that honours fsGroup gives it.
        for path in inputs.claims.values() {
            std::fs::create_dir_all(path).map_err(io("create", path))?;
            own(path, group, 0o2770).map_err(io("own", path))?;
            // The provisioner's directory of volumes must be traversable to reach it.
            if let Some(parent) = path.parent() {
                traversable(parent).map_err(io("set the mode of", parent))?;
            }
        }
        readable(&launch, dir)?;
        let child = spawn(&launch, dir).map_err(io("start", &launch.program))?;
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

pub(super) fn write_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, contents)
}

/// `path` with search permission for everyone (what else its mode allows is kept).
fn traversable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if mode & 0o111 == 0o111 {
        return Ok(());
    }
    set_mode(path, mode | 0o111)
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Whether the agent runs as root, and so can start containers as their users.
pub(super) fn agent_is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `path` with `mode`, and the group `group` (a pod's fsGroup) when the agent may give it one.
fn own(path: &Path, group: Option<u32>, mode: u32) -> std::io::Result<()> {
    own_as(path, None, group, mode)
}

/// [`own`], and the owner `user` when given (and the agent may give it).
fn own_as(path: &Path, user: Option<u32>, group: Option<u32>, mode: u32) -> std::io::Result<()> {
    if (user.is_some() || group.is_some()) && agent_is_root() {
        std::os::unix::fs::chown(path, user, group)?;
    }
    set_mode(path, mode)
}

/// Every file the container mounts must be readable by its user, as the files now are: the
/// agent checks it by their modes (a pod that only works as root fails here, as in a cluster).
fn readable(launch: &Launch, dir: &Path) -> Result<(), LaunchError> {
    use std::os::unix::fs::MetadataExt;
    let who = &launch.identity;
    for f in &launch.files {
        let meta = std::fs::metadata(dir.join(&f.path)).map_err(|e| {
            LaunchError::Unsupported(format!("read {}: {e}", dir.join(&f.path).display()))
        })?;
        let mode = meta.mode();
        let ok = who.uid == 0
            || (meta.uid() == who.uid && mode & 0o400 != 0)
            || ((meta.gid() == who.gid || who.groups.contains(&meta.gid())) && mode & 0o040 != 0)
            || mode & 0o004 != 0;
        if !ok {
            return Err(LaunchError::Unsupported(format!(
                "container {:?} runs as {}:{} (groups {:?}) and cannot read {} (mode {:o}, \
                 owner {}:{})",
                launch.container,
                who.uid,
                who.gid,
                who.groups,
                f.path.display(),
                mode & 0o7777,
                meta.uid(),
                meta.gid()
            )));
        }
    }
    Ok(())
}

pub(super) fn spawn(launch: &Launch, dir: &Path) -> std::io::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", launch.container)))?;
    let mut command = Command::new(&launch.program);
    as_the_container(&mut command, &launch.identity);
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

/// Runs `command` as `identity` (when the agent is root: otherwise as the agent, the files'
/// readability checked by [`readable`]), killed with the agent's thread — with the test
/// process — so that none outlives it.
pub(super) fn as_the_container(command: &mut Command, identity: &pod::Identity) {
    use std::os::unix::process::CommandExt;
    // Made before the fork: nothing may allocate between fork and exec.
    let switch: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)> =
        agent_is_root().then(|| (identity.uid, identity.gid, identity.groups.clone()));
    // SAFETY: setgroups, setgid, setuid and prctl are async-signal-safe; nothing else runs
    // between fork and exec. The death signal is set last: a change of credentials clears it.
    unsafe {
        command.pre_exec(move || {
            if let Some((uid, gid, groups)) = &switch
                && (libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
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
