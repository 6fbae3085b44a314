//! How the node agent runs one Pod as local processes: a pure translation of the Pod (and the
//! ConfigMaps, Secrets and tokens it refers to, already fetched) into a launch — program, args,
//! environment and files. What a container runtime gives a pod and a process lacks is emulated
//! here, and only here:
//!
//! - **images**: an image whose repository ends in `lake` or `lake-operator` runs the binary of
//!   that name built by this workspace; any other image cannot be pulled;
//! - **filesystem**: each volume is a directory under the pod's directory — a
//!   PersistentVolumeClaim's is its bound volume's host path, so it outlives the pod — and every
//!   environment value or argument that names a mount path (or `file://` one) is rewritten to
//!   that directory;
//! - **network**: each pod gets its own loopback address (`127.0.0.N`) as its pod IP, and a bind
//!   to `0.0.0.0:P` in its environment becomes `<pod IP>:P`, as a network namespace would make it;
//! - **workload identity** (the EKS pod-identity webhook's part): a ServiceAccount annotated with
//!   `eks.amazonaws.com/role-arn` gets `AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE` (a token
//!   the API server issues for that ServiceAccount, audience `sts.amazonaws.com`);
//! - **the AWS network**: `AWS_ENDPOINT_URL` points every AWS SDK at the emulator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, Volume};

/// What the agent fetched for a pod before launching it.
#[derive(Debug, Default, Clone)]
pub struct PodInputs {
    /// ConfigMap name → data.
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// Secret name → data.
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Projected service-account token volume sources, by `(volume, path)`: the token.
    pub projected_tokens: BTreeMap<(String, String), String>,
    /// The IRSA role and its web-identity token, when the ServiceAccount asks for one.
    pub irsa: Option<(String, String)>,
    /// PersistentVolumeClaim name → the host path of the volume bound to it.
    pub claims: BTreeMap<String, PathBuf>,
}

/// A file the launch needs, relative to the pod directory.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    pub path: PathBuf,
    pub contents: Vec<u8>,
    pub mode: u32,
}

/// Who a container runs as: its (pod's) `runAsUser`, `runAsGroup`, and supplementary groups
/// (`fsGroup`, `supplementalGroups`), as a kubelet would start it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// The pod's `fsGroup`: the group its volumes' files belong to.
    pub fs_group: Option<u32>,
}

/// The identity `container` of `pod` runs as. A container that must not run as root
/// (`runAsNonRoot`) without a non-root `runAsUser` is refused, as a kubelet refuses it; without
/// any security context, it runs as root, as a container image without a user would.
pub fn identity(pod: &Pod, container: &Container) -> Result<Identity, LaunchError> {
    let pod_context = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let own = container.security_context.as_ref();
    let id = |v: Option<i64>, what: &str| -> Result<Option<u32>, LaunchError> {
        v.map(|v| u32::try_from(v).map_err(|_| LaunchError::Unsupported(format!("{what} {v}"))))
            .transpose()
    };
    let uid = id(
        own.and_then(|c| c.run_as_user)
            .or(pod_context.and_then(|c| c.run_as_user)),
        "runAsUser",
    )?;
    let gid = id(
        own.and_then(|c| c.run_as_group)
            .or(pod_context.and_then(|c| c.run_as_group)),
        "runAsGroup",
    )?;
    let non_root = own
        .and_then(|c| c.run_as_non_root)
        .or(pod_context.and_then(|c| c.run_as_non_root))
        .unwrap_or(false);
    if non_root && uid.unwrap_or(0) == 0 {
        return Err(LaunchError::Unsupported(format!(
            "container {:?}: runAsNonRoot without a non-root runAsUser",
            container.name
        )));
    }
    let fs_group = id(pod_context.and_then(|c| c.fs_group), "fsGroup")?;
    let mut groups: Vec<u32> = fs_group.into_iter().collect();
    for g in pod_context
        .and_then(|c| c.supplemental_groups.clone())
        .into_iter()
        .flatten()
    {
        groups.extend(id(Some(g), "supplementalGroups")?);
    }
    Ok(Identity {
        uid: uid.unwrap_or(0),
        gid: gid.unwrap_or(0),
        groups,
        fs_group,
    })
}

/// One container, ready to start.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub container: String,
    /// Who it runs as.
    pub identity: Identity,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Directories to create (volumes, emptyDirs), relative to the pod directory.
    pub dirs: Vec<PathBuf>,
    pub files: Vec<File>,
    /// The readiness probe, resolved: a TCP port on the pod IP.
    pub ready_port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchError {
    #[error("image {0:?} cannot be pulled: the node agent runs only lake and lake-operator images")]
    Image(String),
    #[error("{kind} {name:?} not found")]
    Missing { kind: &'static str, name: String },
    #[error("{0} is not supported by the node agent")]
    Unsupported(String),
}

/// The settings every pod of the node shares.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Where the workspace's binaries are.
    pub binaries: PathBuf,
    /// `AWS_ENDPOINT_URL` for every pod (the emulator).
    pub aws_endpoint: Option<String>,
    /// `AWS_REGION` for pods with workload identity.
    pub aws_region: String,
    /// The API server (`https://host:port`), given to every pod as the kubelet does
    /// (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`).
    pub api_server: Option<String>,
}

/// The binary an image runs.
pub fn image_binary(settings: &NodeSettings, image: &str) -> Result<PathBuf, LaunchError> {
    let repository = image.rsplit_once(':').map_or(image, |(r, tag)| {
        // `host:port/repo` has a `:` that is not a tag separator.
        if tag.contains('/') { image } else { r }
    });
    let name = repository.rsplit('/').next().unwrap_or(repository);
    match name {
        "lake" | "lake-operator" => Ok(settings.binaries.join(name)),
        _ => Err(LaunchError::Image(image.to_owned())),
    }
}

fn volume_dir(volume: &str) -> PathBuf {
    Path::new("volumes").join(volume)
}

/// A ConfigMap's or Secret's data as files: every key under its own name, or with `items` only
/// those keys, each at its path (and mode). A missing item key is an error, as for a kubelet.
fn project(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&[k8s_openapi::api::core::v1::KeyToPath]>,
    mode: u32,
    volume: &str,
) -> Result<Vec<(String, Vec<u8>, u32)>, LaunchError> {
    let Some(items) = items else {
        return Ok(data.into_iter().map(|(k, v)| (k, v, mode)).collect());
    };
    items
        .iter()
        .map(|item| {
            let value = data
                .get(&item.key)
                .cloned()
                .ok_or_else(|| LaunchError::Missing {
                    kind: "key",
                    name: format!("{} (volume {volume})", item.key),
                })?;
            let mode = item.mode.map_or(mode, |m| m as u32);
            Ok((item.path.clone(), value, mode))
        })
        .collect()
}

/// The directories and files of every volume, and where each is mounted, for one container.
fn volumes(pod: &Pod, inputs: &PodInputs) -> Result<(Vec<PathBuf>, Vec<File>), LaunchError> {
    let spec = pod.spec.as_ref();
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let mut add = |volume: &Volume, key: &str, contents: Vec<u8>, mode: u32| {
        files.push(File {
            path: volume_dir(&volume.name).join(key),
            contents,
            mode,
        });
    };
    for volume in spec.and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        // A claim's directory is its volume's, not the pod's (see `volume_hosts`).
        if volume.persistent_volume_claim.is_some() {
            continue;
        }
        dirs.push(volume_dir(&volume.name));
        if volume.empty_dir.is_some() {
            continue;
        }
        if let Some(source) = &volume.config_map {
            let data = inputs.config_maps.get(&source.name);
            let data = match (data, source.optional) {
                (Some(d), _) => d.clone(),
                (None, Some(true)) => BTreeMap::new(),
                (None, _) => {
                    return Err(LaunchError::Missing {
                        kind: "ConfigMap",
                        name: source.name.clone(),
                    });
                }
            };
            let mode = source.default_mode.unwrap_or(0o644) as u32;
            let data = data.into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
            for (path, value, mode) in project(data, source.items.as_deref(), mode, &volume.name)? {
                add(volume, &path, value, mode);
            }
        } else if let Some(source) = &volume.secret {
            let name = source.secret_name.clone().unwrap_or_default();
            let Some(data) = inputs.secrets.get(&name) else {
                if source.optional == Some(true) {
                    continue;
                }
                return Err(LaunchError::Missing {
                    kind: "Secret",
                    name,
                });
            };
            let mode = source.default_mode.unwrap_or(0o644) as u32;
            for (path, value, mode) in
                project(data.clone(), source.items.as_deref(), mode, &volume.name)?
            {
                add(volume, &path, value, mode);
            }
        } else if let Some(projected) = &volume.projected {
            let mode = projected.default_mode.unwrap_or(0o644) as u32;
            for source in projected.sources.iter().flatten() {
                if let Some(token) = &source.service_account_token {
                    let key = (volume.name.clone(), token.path.clone());
                    let token = inputs
                        .projected_tokens
                        .get(&key)
                        .cloned()
                        .unwrap_or_default();
                    add(volume, &key.1, token.into_bytes(), mode);
                } else if let Some(cm) = &source.config_map {
                    let name = cm.name.clone();
                    let data = inputs.config_maps.get(&name).cloned().unwrap_or_default();
                    for (key, value) in data {
                        add(volume, &key, value.into_bytes(), mode);
                    }
                } else if let Some(downward) = &source.downward_api {
                    for item in downward.items.iter().flatten() {
                        let value = match item.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                            Some("metadata.namespace") => pod.metadata.namespace.clone(),
                            Some("metadata.name") => pod.metadata.name.clone(),
                            _ => None,
                        };
                        add(
                            volume,
                            &item.path,
                            value.unwrap_or_default().into_bytes(),
                            mode,
                        );
                    }
                }
            }
        } else {
            return Err(LaunchError::Unsupported(format!(
                "volume {:?}",
                volume.name
            )));
        }
    }
    Ok((dirs, files))
}

/// Volume name → its host directory: under `pod_dir`, or for a claim its bound volume's path
/// (a claim not bound yet keeps the pod waiting, as a kubelet would).
fn volume_hosts(
    pod: &Pod,
    inputs: &PodInputs,
    pod_dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, LaunchError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .map(|volume| {
            let host = match &volume.persistent_volume_claim {
                Some(claim) => inputs
                    .claims
                    .get(&claim.claim_name)
                    .cloned()
                    .ok_or_else(|| LaunchError::Missing {
                        kind: "bound PersistentVolumeClaim",
                        name: claim.claim_name.clone(),
                    })?,
                None => pod_dir.join(volume_dir(&volume.name)),
            };
            Ok((volume.name.clone(), host))
        })
        .collect()
}

/// Mount path → host path (absolute), longest mount path first.
fn mounts(
    container: &Container,
    hosts: &BTreeMap<String, PathBuf>,
) -> Result<Vec<(String, PathBuf)>, LaunchError> {
    let mut mounts = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let mut host = hosts
                .get(&m.name)
                .cloned()
                .ok_or_else(|| LaunchError::Missing {
                    kind: "volume",
                    name: m.name.clone(),
                })?;
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                host = host.join(sub);
            }
            Ok((m.mount_path.trim_end_matches('/').to_owned(), host))
        })
        .collect::<Result<Vec<_>, LaunchError>>()?;
    mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    Ok(mounts)
}

/// `value` with a mount path (at its start, or after `file://`) replaced by the host path, and
/// a bind to every address replaced by the pod IP.
fn rewrite(value: &str, mounts: &[(String, PathBuf)], pod_ip: &str) -> String {
    if let Some(port) = value.strip_prefix("0.0.0.0:") {
        return format!("{pod_ip}:{port}");
    }
    // The longest mount that names the value wins, once (a host path may itself start with a
    // shorter mount path, e.g. `/tmp`).
    for (mount, host) in mounts {
        for prefix in ["", "file://"] {
            let at = format!("{prefix}{mount}");
            if value == at || value.starts_with(&format!("{at}/")) {
                return format!("{prefix}{}{}", host.display(), &value[at.len()..]);
            }
        }
    }
    value.to_owned()
}

fn field(pod: &Pod, path: &str, pod_ip: &str) -> Option<String> {
    match path {
        "metadata.name" => pod.metadata.name.clone(),
        "metadata.namespace" => pod.metadata.namespace.clone(),
        "spec.serviceAccountName" => pod.spec.as_ref()?.service_account_name.clone(),
        "spec.nodeName" => pod.spec.as_ref()?.node_name.clone(),
        "status.podIP" => Some(pod_ip.to_owned()),
        "status.hostIP" => Some("127.0.0.1".to_owned()),
        _ => None,
    }
}

/// The variables the node (and, for IRSA, the identity webhook) gives every container.
fn node_env(
    inputs: &PodInputs,
    settings: &NodeSettings,
    pod_dir: &Path,
    files: &mut Vec<File>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("HOME".to_owned(), pod_dir.display().to_string());
    env.insert("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned());
    if let Some(endpoint) = &settings.aws_endpoint {
        env.insert("AWS_ENDPOINT_URL".to_owned(), endpoint.clone());
    }
    let api = settings.api_server.as_deref().and_then(|s| {
        let authority = s.strip_prefix("https://")?.trim_end_matches('/');
        authority.rsplit_once(':')
    });
    if let Some((host, port)) = api {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        env.insert("KUBERNETES_SERVICE_HOST".to_owned(), host.to_owned());
        env.insert("KUBERNETES_SERVICE_PORT".to_owned(), port.to_owned());
    }
    if let Some((role, token)) = &inputs.irsa {
        let path = Path::new("irsa").join("token");
        files.push(File {
            path: path.clone(),
            contents: token.clone().into_bytes(),
            mode: 0o600,
        });
        env.insert("AWS_ROLE_ARN".to_owned(), role.clone());
        env.insert(
            "AWS_WEB_IDENTITY_TOKEN_FILE".to_owned(),
            pod_dir.join(path).display().to_string(),
        );
        env.insert("AWS_REGION".to_owned(), settings.aws_region.clone());
        env.insert("AWS_DEFAULT_REGION".to_owned(), settings.aws_region.clone());
    }
    env
}

/// The launch of every container of `pod`, in order.
pub fn launches(
    pod: &Pod,
    inputs: &PodInputs,
    settings: &NodeSettings,
    pod_dir: &Path,
    pod_ip: &str,
) -> Result<Vec<Launch>, LaunchError> {
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| LaunchError::Unsupported("a pod without a spec".into()))?;
    if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(LaunchError::Unsupported("init containers".into()));
    }
    let (dirs, mut files) = volumes(pod, inputs)?;
    let hosts = volume_hosts(pod, inputs, pod_dir)?;
    let mut launches = Vec::new();
    for container in &spec.containers {
        let mounts = mounts(container, &hosts)?;
        let image = container.image.clone().unwrap_or_default();
        let (program, mut args) = match container.command.as_deref() {
            Some([first, rest @ ..]) => {
                let name = Path::new(first)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or(first);
                (image_binary(settings, name)?, rest.to_vec())
            }
            _ => (image_binary(settings, &image)?, Vec::new()),
        };
        args.extend(container.args.iter().flatten().cloned());

        let mut env = BTreeMap::new();
        for from in container.env_from.iter().flatten() {
            let prefix = from.prefix.clone().unwrap_or_default();
            if let Some(cm) = &from.config_map_ref {
                match inputs.config_maps.get(&cm.name) {
                    Some(data) => {
                        for (k, v) in data {
                            env.insert(format!("{prefix}{k}"), v.clone());
                        }
                    }
                    None if cm.optional == Some(true) => {}
                    None => {
                        return Err(LaunchError::Missing {
                            kind: "ConfigMap",
                            name: cm.name.clone(),
                        });
                    }
                }
            }
            if let Some(secret) = &from.secret_ref {
                match inputs.secrets.get(&secret.name) {
                    Some(data) => {
                        for (k, v) in data {
                            env.insert(
                                format!("{prefix}{k}"),
                                String::from_utf8_lossy(v).into_owned(),
                            );
                        }
                    }
                    None if secret.optional == Some(true) => {}
                    None => {
                        return Err(LaunchError::Missing {
                            kind: "Secret",
                            name: secret.name.clone(),
                        });
                    }
                }
            }
        }
        for var in container.env.iter().flatten() {
            let value = match (&var.value, &var.value_from) {
                (Some(v), _) => Some(v.clone()),
                (None, Some(from)) => {
                    if let Some(f) = &from.field_ref {
                        field(pod, &f.field_path, pod_ip)
                    } else if let Some(r) = &from.config_map_key_ref {
                        inputs
                            .config_maps
                            .get(&r.name)
                            .and_then(|d| d.get(&r.key))
                            .cloned()
                    } else if let Some(r) = &from.secret_key_ref {
                        inputs
                            .secrets
                            .get(&r.name)
                            .and_then(|d| d.get(&r.key))
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                    } else {
                        return Err(LaunchError::Unsupported(format!("env {:?}", var.name)));
                    }
                }
                (None, None) => Some(String::new()),
            };
            if let Some(value) = value {
                env.insert(var.name.clone(), value);
            }
        }
        for value in env.values_mut() {
            *value = rewrite(value, &mounts, pod_ip);
        }
        args = args.iter().map(|a| rewrite(a, &mounts, pod_ip)).collect();
        // What the node and the identity webhook add (host paths already: not rewritten), where
        // the container does not set it itself.
        for (key, value) in node_env(inputs, settings, pod_dir, &mut files) {
            env.entry(key).or_insert(value);
        }

        let ready_port = container.readiness_probe.as_ref().and_then(|p| {
            let port = &p.tcp_socket.as_ref()?.port;
            match port {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => {
                    u16::try_from(*n).ok()
                }
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => {
                    container
                        .ports
                        .iter()
                        .flatten()
                        .find(|p| p.name.as_deref() == Some(name))
                        .and_then(|p| u16::try_from(p.container_port).ok())
                }
            }
        });
        launches.push(Launch {
            container: container.name.clone(),
            identity: identity(pod, container)?,
            program,
            args,
            env,
            dirs: dirs.clone(),
            files: files.clone(),
            ready_port,
        });
    }
    Ok(launches)
}

#[cfg(test)]
mod tests;
