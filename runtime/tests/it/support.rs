//! Fixtures: a provisioned cloud lake on the emulator, a local lake, and small record batches.

use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use aws_credential_types::Credentials;
use lake_common::config::RuntimeConfig;
use lake_common::plan::{
    AuthorityPlan, AuthorityRequest, ManifestStore, PlanFields, RegistryStore, Role, StorageRequest,
};
use lake_runtime::aws::AwsConnection;
use lake_runtime::aws::ConnectOptions;
use lake_runtime::catalog::{NamespaceName, TableName};
use lake_runtime::context::{MetadataContext, QueryContext};
use lake_runtime::engine::TableRef;
use lake_runtime::provision;
use lake_testkit::{moto, unique};
use lance::dataset::Dataset;

pub(crate) const REGION: &str = "us-east-1";

pub(crate) fn credentials() -> Credentials {
    Credentials::new("testing", "testing", None, None, "lake-tests")
}

pub(crate) fn options() -> ConnectOptions {
    ConnectOptions {
        credentials: Some(credentials()),
        ..Default::default()
    }
}

/// A cloud lake on the emulator: bucket, both tables provisioned with markers.
pub(crate) struct CloudLake {
    pub cluster: String,
    pub bucket: String,
    pub plan: AuthorityPlan,
    pub aws: AwsConnection,
}

impl CloudLake {
    pub(crate) async fn new() -> Self {
        let moto = moto();
        let cluster = unique("uid");
        let bucket = unique("bkt");
        moto.create_bucket(&bucket);
        let request = AuthorityRequest {
            cluster_name: unique("lake"),
            storage: StorageRequest::S3 {
                bucket: bucket.clone(),
                prefix: "wh".into(),
                region: REGION.into(),
                endpoint: Some(moto.endpoint().into()),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: Some(moto.endpoint().into()),
        };
        let plan = AuthorityPlan::new(&request, &PlanFields::SPEC).expect("valid plan");
        let aws = AwsConnection::new(plan.aws().expect("cloud plan"), &options()).await;
        let (
            RegistryStore::DynamoDb { table: registry },
            ManifestStore::DynamoDb { table: manifest },
        ) = (plan.registry(), plan.manifests())
        else {
            panic!("cloud plan has DynamoDB stores")
        };
        provision::dynamo_tables(&aws.dynamodb(), registry, manifest, &cluster)
            .await
            .expect("provision tables");
        Self {
            cluster,
            bucket,
            plan,
            aws,
        }
    }

    /// The metadata context of this lake.
    pub(crate) async fn metadata(&self) -> MetadataContext {
        MetadataContext::open(&self.plan.metadata(), Some(&self.cluster), &options())
            .await
            .expect("metadata context")
    }

    /// The query context of this lake, built from the query plan only.
    pub(crate) async fn query(&self) -> QueryContext {
        QueryContext::open(&self.plan.query(), Some(&self.cluster), &options())
            .await
            .expect("query context")
    }

    pub(crate) fn registry_table(&self) -> String {
        match self.plan.registry() {
            RegistryStore::DynamoDb { table } => table.to_string(),
            RegistryStore::Embedded { .. } => unreachable!(),
        }
    }

    pub(crate) fn manifest_table(&self) -> String {
        match self.plan.manifests() {
            ManifestStore::DynamoDb { table } => table.to_string(),
            ManifestStore::Embedded { .. } => unreachable!(),
        }
    }

    /// Storage options for pylance (`s3+ddb://`).
    pub(crate) fn pylance_options(&self) -> serde_json::Value {
        let endpoint = moto().endpoint();
        serde_json::json!({
            "aws_endpoint": endpoint,
            "dynamodb_endpoint": endpoint,
            "allow_http": "true",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": REGION,
        })
    }

    pub(crate) fn pylance_uri(&self, table: &TableRef) -> String {
        format!(
            "s3+ddb://{}/wh/{}/{}.lance?ddbTableName={}",
            self.bucket,
            table.namespace,
            table.table,
            self.manifest_table()
        )
    }

    /// Every item of the manifest table, in a stable order (for byte-for-byte comparisons).
    pub(crate) async fn dump_manifest_table(&self) -> Vec<String> {
        let mut rows: Vec<String> = self
            .aws
            .dynamodb()
            .scan()
            .table_name(self.manifest_table())
            .consistent_read(true)
            .send()
            .await
            .expect("scan")
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|item| {
                let mut attrs: Vec<String> = item
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect();
                attrs.sort();
                attrs.join(",")
            })
            .collect();
        rows.sort();
        rows
    }
}

/// Creates `table`'s namespace and the table, committing each of `commits` (rows `id` ranges) as
/// one version: the first creates the table, the rest are appends.
pub(crate) async fn seed(metadata: &MetadataContext, table: &TableRef, commits: &[Range<i64>]) {
    if !metadata
        .registry()
        .namespace_exists(&table.namespace)
        .await
        .unwrap()
    {
        metadata
            .registry()
            .create_namespace(&table.namespace)
            .await
            .unwrap();
    }
    let (first, rest) = commits.split_first().expect("at least one commit");
    metadata
        .create_table(table, schema(), vec![batch(first.clone())])
        .await
        .unwrap();
    for ids in rest {
        metadata
            .engine()
            .append(table, schema(), vec![batch(ids.clone())])
            .await
            .unwrap();
    }
}

/// The authority plan of a local lake in `dir`.
pub(crate) fn local_plan(dir: &std::path::Path) -> AuthorityPlan {
    AuthorityPlan::new(
        &AuthorityRequest {
            cluster_name: "local".into(),
            storage: StorageRequest::Local {
                path: dir.display().to_string(),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: None,
        },
        &PlanFields::SPEC,
    )
    .unwrap()
}

pub(crate) fn table(ns: &str, name: &str) -> TableRef {
    TableRef::new(
        NamespaceName::parse(ns).unwrap(),
        TableName::parse(name).unwrap(),
    )
}

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

pub(crate) fn batch(ids: Range<i64>) -> RecordBatch {
    batch_named(ids, |i| format!("row-{i}"))
}

/// Rows `ids` of [`schema`], each named by `name`.
pub(crate) fn batch_named(ids: Range<i64>, name: impl Fn(i64) -> String) -> RecordBatch {
    let names: Vec<String> = ids.clone().map(name).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap()
}

/// The sorted `id` column of a dataset.
pub(crate) async fn ids(dataset: &Dataset) -> Vec<i64> {
    let batch = dataset.scan().try_into_batch().await.expect("scan");
    let column = batch
        .column_by_name("id")
        .expect("id column")
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("int64 ids")
        .clone();
    let mut ids: Vec<i64> = column.iter().flatten().collect();
    ids.sort_unstable();
    ids
}

/// `lake local` on free ports; killed when dropped.
pub(crate) struct LocalLake {
    pub child: Child,
    pub query: String,
    pub metadata: String,
    /// The query worker ports (`--query-workers`), if any.
    pub workers: Vec<String>,
    pub dir: tempfile::TempDir,
}

impl LocalLake {
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    pub(crate) fn start_with(extra: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), extra)
    }

    /// Starts on an existing data directory (e.g. after a restart).
    pub(crate) fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Self {
        Self::spawn(dir, extra, None)
    }

    /// Starts with at most `address_space` bytes of address space, as a pod's memory limit
    /// bounds it: an allocation past it fails, and a failed allocation aborts the process.
    pub(crate) fn start_limited(extra: &[&str], address_space: u64) -> Self {
        Self::spawn(tempfile::tempdir().unwrap(), extra, Some(address_space))
    }

    fn spawn(dir: tempfile::TempDir, extra: &[&str], address_space: Option<u64>) -> Self {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(env!("CARGO_BIN_EXE_lake"));
        command
            .args(["local", "--data"])
            .arg(dir.path())
            .args([
                "--query-addr",
                "127.0.0.1:0",
                "--metadata-addr",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(limit) = address_space {
            // glibc reserves 64 MiB of address space per malloc arena (up to 8 per core).
            command.env("MALLOC_ARENA_MAX", "2");
            // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let rlimit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &rlimit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut endpoint = |role: &str| loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("lake local exited before printing the {role} endpoint"))
                .unwrap();
            if let Some(rest) = line.trim().strip_prefix(role) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        let query = endpoint("query");
        let metadata = endpoint("metadata");
        // The banner's next line lists the workers, if there are any (a blank line otherwise).
        let workers = match lines.next() {
            Some(Ok(line)) => line
                .trim()
                .strip_prefix("workers")
                .map(|rest| {
                    rest.split_whitespace()
                        .take_while(|w| w.starts_with("https://"))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Self {
            child,
            query,
            metadata,
            workers,
            dir,
        }
    }
}

impl LocalLake {
    /// Stops the server and hands back its data directory.
    pub(crate) fn stop(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    /// The server's peak resident memory so far, in bytes (Linux `VmHWM`).
    pub(crate) fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status");
        kb * 1024
    }
}

impl Drop for LocalLake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lake serve` for one role of `lake`, as a process with its own AWS access key id (so the
/// emulator's request log tells the two roles apart); killed when dropped.
pub(crate) struct Served {
    pub child: std::process::Child,
    pub endpoint: String,
}

impl Served {
    pub(crate) fn start(
        lake: &CloudLake,
        role: Role,
        access_key: &str,
        metadata: Option<&str>,
    ) -> Self {
        Self::start_with(lake, role, access_key, metadata, &[])
    }

    /// [`Served::start`] with more environment (TLS files, say).
    pub(crate) fn start_with(
        lake: &CloudLake,
        role: Role,
        access_key: &str,
        metadata: Option<&str>,
        env: &[(&str, &str)],
    ) -> Self {
        let config = RuntimeConfig::for_role(
            &lake.plan,
            role,
            Some(lake.cluster.clone()),
            "127.0.0.1:0".parse().unwrap(),
            metadata.map(str::to_owned),
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_lake"))
            .arg("serve")
            .env_clear()
            .envs(config.to_vars())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_ACCESS_KEY_ID", access_key)
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            // These tests are about what each role may reach, not about its clients' tokens.
            .env("LAKE_AUTH", "none")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let endpoint = line
            .trim()
            .strip_prefix(&format!("{role} "))
            .unwrap_or_else(|| panic!("lake serve --role {role} printed {line:?}"))
            .to_owned();
        Self { child, endpoint }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (service, action, resource) of each recorded request signed with `access_key`: DynamoDB as
/// (`dynamodb`, action, TableName), S3 as (`s3`, HTTP method, URL).
pub(crate) fn requests_of(
    log: &[serde_json::Value],
    access_key: &str,
) -> Vec<(String, String, String)> {
    lake_testkit::requests_signed_by(log, access_key)
        .into_iter()
        .map(|r| (r.service, r.action, r.resource))
        .collect()
}

/// A test CA (`ca.pem`) and a server certificate it signed for 127.0.0.1 and localhost
/// (`server.pem`, `server.key`), written into `dir` with openssl.
pub(crate) fn test_certificates(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (Debian package openssl; scripts/bootstrap installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=lake-test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);
}

/// `command`'s output if it exits within `limit`; otherwise it is killed and `None`. (What it
/// writes must fit in the pipes: a refusal is a few lines.)
pub(crate) fn exited_within(
    mut command: Command,
    limit: std::time::Duration,
) -> Option<std::process::Output> {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(child.wait_with_output().unwrap())
}

/// `lake maintain` on the stopped lake in `dir`, keeping no old version and no grace period.
pub(crate) fn maintain_now(dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lake"))
        .arg("maintain")
        .arg("--data")
        .arg(dir)
        .args(["--retention-seconds", "0", "--grace-seconds", "0"])
        .output()
        .unwrap()
}

/// `lake sql` against `endpoint`: (succeeded, stdout, stderr).
pub(crate) fn lake_sql(endpoint: &str, statement: &str) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(["sql", endpoint, statement])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
