use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kube::CustomResourceExt;
use lake_operator::allowlist::{Allowlist, AllowlistError, admit};
use lake_operator::aws::AwsSettings;
use lake_operator::controller;
use lake_operator::crd::{LakeCluster, crd_yaml};
use lake_operator::leader::LeaderElection;
use lake_operator::plan::IamInputs;
use lake_operator::{render, strict, validate};

/// The lake operator: LakeCluster → DynamoDB tables, IAM policies, query and metadata workloads.
#[derive(Parser)]
#[command(name = "lake-operator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller: reconcile LakeClusters (in-cluster config or KUBECONFIG).
    Run {
        /// Watch only this namespace (default: all).
        #[arg(long, env = "LAKE_OPERATOR_NAMESPACE")]
        namespace: Option<String>,
        /// Where /metrics and /healthz are served.
        #[arg(
            long,
            env = "LAKE_OPERATOR_METRICS_ADDR",
            default_value = "0.0.0.0:8080"
        )]
        metrics_addr: std::net::SocketAddr,
        /// One endpoint for DynamoDB and IAM instead of AWS (emulators).
        #[arg(long, env = "LAKE_OPERATOR_AWS_ENDPOINT")]
        aws_endpoint: Option<String>,
        /// The cluster's IAM OIDC provider, for the IRSA trust policies reported in status.
        #[arg(long, env = "LAKE_OPERATOR_OIDC_PROVIDER")]
        oidc_provider: Option<String>,
        /// The administrator's allowlist (YAML): which roles, buckets/prefixes and tables each
        /// namespace may use. Without it no IAM policy is managed for anyone (docs/operator.md).
        #[arg(long, env = "LAKE_OPERATOR_ALLOWLIST")]
        allowlist: Option<PathBuf>,
        /// Reconcile only while holding a Lease in this namespace (run several replicas);
        /// without it this process always reconciles (run one replica).
        #[arg(long, env = "LAKE_OPERATOR_LEADER_ELECTION_NAMESPACE")]
        leader_election_namespace: Option<String>,
        /// The Lease's name.
        #[arg(long, env = "LAKE_OPERATOR_LEASE", default_value = "lake-operator")]
        lease: String,
        /// How long a replica that stops renewing keeps the Lease (the fail-over time).
        #[arg(long, env = "LAKE_OPERATOR_LEASE_SECONDS", default_value_t = 15)]
        lease_seconds: u64,
        /// This replica's identity in the Lease (default: the pod name, else host and pid).
        #[arg(long, env = "POD_NAME")]
        identity: Option<String>,
    },
    /// Print the LakeCluster CustomResourceDefinition as YAML.
    Crd,
    /// Validate a LakeCluster file and print its plan, offline (no cluster, no AWS).
    Render {
        /// The LakeCluster manifest (YAML or JSON).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
        output: Format,
        /// The cluster's IAM OIDC provider (for the IRSA trust policies), e.g.
        /// oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLE.
        #[arg(long)]
        oidc_provider: Option<String>,
        /// Check the spec against an operator allowlist too, as `run --allowlist` would.
        #[arg(long)]
        allowlist: Option<PathBuf>,
        /// The operator's own AWS account, which role ARNs must be in unless the allowlist
        /// lists others (`run` asks STS).
        #[arg(long)]
        account: Option<String>,
        /// The cluster id the tables' markers carry (the uid of the LakeCluster that created
        /// them): `-o manifests` needs it, since pods refuse tables marked for another cluster.
        #[arg(long)]
        cluster_id: Option<String>,
    },
    /// Write a lake v1 shared table made from a v2 lake's two tables (for tests, benches and
    /// trying a migration; docs/guides/migration.md): their manifest rows verbatim, one latest
    /// pointer per dataset, the registry rows, and `--history` rows of dropped datasets. The
    /// credentials are the AWS default chain's.
    LegacyFixture {
        /// The v2 lake's manifest table (read).
        #[arg(long)]
        manifest_table: String,
        /// The v2 lake's registry table (read).
        #[arg(long)]
        registry_table: String,
        /// The v1 table to create and fill.
        #[arg(long)]
        into: String,
        /// Manifest rows of dropped datasets to add (100 versions each).
        #[arg(long, default_value_t = 0)]
        history: usize,
        #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
        region: String,
        /// One endpoint for DynamoDB instead of AWS (emulators).
        #[arg(long, env = "AWS_ENDPOINT_URL")]
        aws_endpoint: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// The plan summary (cluster, roles, tables, policies), then every object as its own
    /// YAML document.
    Yaml,
    /// Everything as one JSON document.
    Json,
    /// Only the Kubernetes objects, as multi-document YAML (`kubectl apply -f -`).
    Manifests,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            namespace,
            metrics_addr,
            aws_endpoint,
            oidc_provider,
            allowlist,
            leader_election_namespace,
            lease,
            lease_seconds,
            identity,
        } => match load_allowlist(allowlist.as_deref()) {
            Ok(allowlist) => run(
                namespace,
                metrics_addr,
                aws_endpoint,
                oidc_provider,
                allowlist,
                leader_election_namespace.map(|namespace| LeaderElection {
                    namespace,
                    lease,
                    identity: identity.unwrap_or_else(default_identity),
                    ttl: std::time::Duration::from_secs(lease_seconds.max(3)),
                }),
            ),
            Err(e) => fail(&e.to_string()),
        },
        Command::LegacyFixture {
            manifest_table,
            registry_table,
            into,
            history,
            region,
            aws_endpoint,
        } => legacy_fixture(
            &manifest_table,
            &registry_table,
            &into,
            history,
            &region,
            aws_endpoint,
        ),
        Command::Crd => match crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("cannot serialise the CRD: {e}")),
        },
        Command::Render {
            file,
            output,
            oidc_provider,
            allowlist,
            account,
            cluster_id,
        } => {
            let allowlist = match allowlist.as_deref().map(Allowlist::load).transpose() {
                Ok(allowlist) => allowlist,
                Err(e) => return fail(&e.to_string()),
            };
            let render = Render {
                output,
                oidc_provider,
                allowlist: allowlist.as_ref(),
                account,
                cluster_id,
            };
            render_file(&file, render)
        }
    }
}

fn legacy_fixture(
    manifest_table: &str,
    registry_table: &str,
    into: &str,
    history: usize,
    region: &str,
    endpoint: Option<String>,
) -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    let written = runtime.block_on(async {
        let pool = lake_operator::aws::AwsPool::new(AwsSettings {
            endpoint,
            ..Default::default()
        });
        let clients = pool.clients(region).await;
        lake_operator::migration::fixture::write(
            &clients.dynamodb,
            manifest_table,
            registry_table,
            into,
            history,
        )
        .await
    });
    match written {
        Ok(summary) => {
            println!(
                "{into}: {} items ({} manifest rows, {} pointers, {} registry rows, {} history rows)",
                summary.items(),
                summary.manifest_rows,
                summary.pointers,
                summary.registry_rows,
                summary.history_rows
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.to_string()),
    }
}

/// The allowlist file, or the empty one (nothing allowed) when none is given.
fn load_allowlist(path: Option<&std::path::Path>) -> Result<Allowlist, AllowlistError> {
    match path {
        Some(path) => Allowlist::load(path),
        None => Ok(Allowlist::default()),
    }
}

fn run(
    namespace: Option<String>,
    metrics_addr: std::net::SocketAddr,
    aws_endpoint: Option<String>,
    oidc_provider: Option<String>,
    allowlist: Allowlist,
    leader_election: Option<LeaderElection>,
) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // kube's TLS and the AWS SDK's both use rustls; choose the provider once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    let options = controller::RunOptions {
        namespace,
        metrics_addr,
        aws: AwsSettings {
            endpoint: aws_endpoint,
            ..Default::default()
        },
        oidc_provider,
        allowlist,
        leader_election,
    };
    match runtime.block_on(controller::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

/// Outside a pod (no `POD_NAME`): the host name and process id.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// How to render.
struct Render<'a> {
    output: Format,
    oidc_provider: Option<String>,
    allowlist: Option<&'a Allowlist>,
    account: Option<String>,
    cluster_id: Option<String>,
}

/// A cluster id as the markers and `LAKE_CLUSTER_ID` carry it (a Kubernetes uid).
fn check_cluster_id(id: &str) -> Result<(), String> {
    let ok =
        (1..=128).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--cluster-id {id:?}: must be 1-128 characters of letters, digits and '-' (the \
             uid in the tables' markers, e.g. from `kubectl get lake NAME -o jsonpath='{{.metadata.uid}}'`)"
        ))
    }
}

fn render_file(file: &PathBuf, render: Render<'_>) -> ExitCode {
    let Render {
        output,
        oidc_provider,
        allowlist,
        account,
        cluster_id,
    } = render;
    if let Some(id) = &cluster_id
        && let Err(e) = check_cluster_id(id)
    {
        return fail(&e);
    }
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => return fail(&format!("cannot read {}: {e}", file.display())),
    };
    let value: serde_json::Value = match serde_yaml::from_str(&text) {
        Ok(value) => value,
        Err(e) => return fail(&format!("{} is not valid YAML: {e}", file.display())),
    };
    let (api_version, kind) = (value.get("apiVersion"), value.get("kind"));
    if api_version.and_then(|v| v.as_str()) != Some("lake.dev/v1alpha1")
        || kind.and_then(|v| v.as_str()) != Some("LakeCluster")
    {
        return fail(&format!(
            "{}: expected apiVersion lake.dev/v1alpha1 and kind LakeCluster",
            file.display()
        ));
    }
    let unknown = spec_unknown_fields(&value);
    if !unknown.is_empty() {
        for path in &unknown {
            eprintln!("error: {path}: unknown field");
        }
        return ExitCode::FAILURE;
    }
    let cluster: LakeCluster = match serde_json::from_value(value) {
        Ok(cluster) => cluster,
        Err(e) => return fail(&format!("{}: {e}", file.display())),
    };
    let mut validated = match validate::validate(&cluster) {
        Ok(validated) => validated,
        Err(errors) => {
            eprintln!("error: {} is not a valid LakeCluster:", file.display());
            for error in errors.iter() {
                eprintln!("  - {error}");
            }
            return ExitCode::FAILURE;
        }
    };
    if let Some(allowlist) = allowlist
        && let Err(errors) = admit(&validated, allowlist, account.as_deref())
    {
        eprintln!("error: {} is refused by the allowlist:", file.display());
        for error in errors.iter() {
            eprintln!("  - {error}");
        }
        return ExitCode::FAILURE;
    }
    if cluster_id.is_some() {
        validated.uid = cluster_id;
    }
    // A uid from the file (an exported object) is checked like the flag.
    if let Some(uid) = &validated.uid
        && let Err(e) = check_cluster_id(uid)
    {
        return fail(&e);
    }
    let inputs = IamInputs {
        oidc_provider,
        ..Default::default()
    };
    let plan = render::render(&validated, &inputs);
    let yaml_docs = |values: &mut dyn Iterator<Item = Result<String, serde_yaml::Error>>| {
        values
            .map(|doc| doc.map(|d| format!("---\n{d}")))
            .collect::<Result<String, _>>()
            .map_err(|e| e.to_string())
    };
    let printed = match output {
        Format::Yaml => {
            let summary = serde_json::json!({
                "cluster": plan.cluster,
                "roles": plan.roles,
                "tables": plan.tables,
                "policies": plan.policies,
            });
            yaml_docs(
                &mut std::iter::once(serde_yaml::to_string(&summary))
                    .chain(plan.objects.iter().map(serde_yaml::to_string)),
            )
        }
        Format::Manifests => {
            // Objects to apply by hand: nothing may stand in for what only reconcile learns,
            // and nothing owns them (no LakeCluster exists to own them).
            // A local lake has no tables, so no markers to match.
            if validated.uid.is_none() && validated.local_volume.is_none() {
                return fail(
                    "-o manifests needs --cluster-id: the pods refuse tables whose markers name \
                     another cluster (give the uid of the LakeCluster that created the tables)",
                );
            }
            let objects: Vec<lake_operator::plan::Object> = plan
                .objects
                .iter()
                .cloned()
                .map(|mut object| {
                    object.metadata_mut().owner_references = None;
                    object
                })
                .collect();
            if let Err(e) = lake_operator::apply::workloads::check_resolved(&objects) {
                return fail(&format!(
                    "{e}: give the roles as ARNs (spec.iam.queryRole, spec.iam.metadataRole, spec.iam.maintenanceRole) to render manifests offline"
                ));
            }
            yaml_docs(&mut objects.iter().map(serde_yaml::to_string))
        }
        Format::Json => serde_json::to_string_pretty(&plan)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
    };
    match printed {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&format!("cannot serialise the plan: {e}")),
    }
}

/// Fields under `spec` that the CRD's schema does not know (apiVersion, kind and metadata are
/// implicit in a CRD schema; status is the operator's).
fn spec_unknown_fields(value: &serde_json::Value) -> Vec<String> {
    let crd = LakeCluster::crd();
    let spec_schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .and_then(|p| p.get("spec"))
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_default();
    let spec = value.get("spec").cloned().unwrap_or_default();
    strict::unknown_fields(&spec, &spec_schema)
        .into_iter()
        .map(|path| format!("spec.{path}"))
        .collect()
}
