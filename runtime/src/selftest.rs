//! `lake selftest`: run in a role's pod (its LAKE_* configuration, its credentials), checks
//! that the role can do what it must and cannot do what it must not, and prints each check.
//!
//! - query: its stores open read-only (the manifest table's marker names this cluster), the
//!   warehouse lists, it holds no registry name (by construction: the query plan has none), and
//!   IAM refuses it PutItem and DeleteItem on the manifest table;
//! - metadata: both stores open (both markers name this cluster) and the registry lists, and
//!   IAM permits it PutItem and DeleteItem on each table.
//! - maintenance: the manifest table opens (its marker names this cluster), the warehouse
//!   lists, it holds no registry name (by construction), and IAM permits it PutItem and a
//!   BatchWriteItem delete on the manifest table (of a row that does not exist: nothing changes).
//!
//! Every write probe (PutItem, DeleteItem) carries a condition that can never hold, so it never
//! changes anything: IAM answers AccessDenied before the condition is evaluated, and a permitted
//! probe fails its condition instead.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use lake_common::config::{MaintenanceConfig, RuntimeConfig};
use lake_common::plan::{ManifestStore, RegistryStore, RolePlan};

use crate::aws::{AwsConnection, ConnectOptions};
use crate::context::{MaintenanceContext, MetadataContext, QueryContext};

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

impl Check {
    /// Passed with `Ok`'s detail, or failed with the error.
    fn of<E: std::fmt::Display>(name: &str, result: Result<String, E>) -> Self {
        match result {
            Ok(detail) => Self::new(name, true, detail),
            Err(e) => Self::new(name, false, e.to_string()),
        }
    }

    fn new(name: impl Into<String>, passed: bool, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            passed,
            detail: detail.into(),
        }
    }
}

/// What a write probe learned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    /// IAM refused it.
    Refused(String),
    /// IAM let it through (its condition then failed: nothing was written).
    Permitted,
    /// Anything else (the table is missing, the network is down…).
    Failed(String),
}

/// A table's key: (partition attribute, sort attribute, whether the sort key is a number).
type KeyShape = (&'static str, &'static str, bool);
const REGISTRY_KEY: KeyShape = ("pk", "sk", false);
const MANIFEST_KEY: KeyShape = ("base_uri", "version", true);

/// The writes probed: every single-item write the policies decide on.
#[derive(Debug, Clone, Copy)]
enum Write {
    PutItem,
    DeleteItem,
}

const WRITES: [Write; 2] = [Write::PutItem, Write::DeleteItem];

/// What an error from a probe says about the policy.
fn classify<E>(e: SdkError<E, HttpResponse>) -> Probe
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e.code() {
        Some("ConditionalCheckFailedException") => Probe::Permitted,
        // Only an authorisation refusal: broken or expired credentials
        // (UnrecognizedClientException, ExpiredTokenException) prove nothing about the policy.
        Some("AccessDeniedException") => Probe::Refused(e.message().unwrap_or_default().to_owned()),
        // The same refusal as some emulators send it: a 403 whose (XML) body says AccessDenied,
        // which the JSON protocol cannot parse.
        None if e.raw_response().is_some_and(|r| {
            r.status().as_u16() == 403
                && r.body().bytes().is_some_and(|b| {
                    String::from_utf8_lossy(b).contains("<Code>AccessDenied</Code>")
                })
        }) =>
        {
            Probe::Refused("AccessDenied (HTTP 403)".to_owned())
        }
        _ => Probe::Failed(aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string()),
    }
}

/// `write` on `table`, conditioned on something that can never hold: it never changes anything.
async fn probe_write(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: KeyShape,
    write: Write,
) -> Probe {
    let (partition, sort, numeric) = key;
    let sort_value = if numeric {
        AttributeValue::N("0".into())
    } else {
        AttributeValue::S("__lake__/selftest".into())
    };
    let partition_value = AttributeValue::S("__lake__/selftest".into());
    let never = "attribute_exists(#k) AND attribute_not_exists(#k)";
    let held =
        || Probe::Failed("an impossible condition held: nothing should have been written".into());
    match write {
        Write::PutItem => match client
            .put_item()
            .table_name(table)
            .item(partition, partition_value)
            .item(sort, sort_value)
            .condition_expression(never)
            .expression_attribute_names("#k", partition)
            .send()
            .await
        {
            Ok(_) => held(),
            Err(e) => classify(e),
        },
        Write::DeleteItem => match client
            .delete_item()
            .table_name(table)
            .key(partition, partition_value)
            .key(sort, sort_value)
            .condition_expression(never)
            .expression_attribute_names("#k", partition)
            .send()
            .await
        {
            Ok(_) => held(),
            Err(e) => classify(e),
        },
    }
}

/// A BatchWriteItem deleting the selftest row, which never exists: permitted or refused,
/// nothing changes. (A batch carries no condition, so only a delete of nothing is safe.)
async fn probe_batch_delete(client: &aws_sdk_dynamodb::Client, table: &str) -> Probe {
    use aws_sdk_dynamodb::types::{DeleteRequest, WriteRequest};
    let (partition, sort, _) = MANIFEST_KEY;
    let request = DeleteRequest::builder()
        .key(partition, AttributeValue::S("__lake__/selftest".into()))
        .key(sort, AttributeValue::N("0".into()))
        .build()
        .map(|delete| WriteRequest::builder().delete_request(delete).build());
    let request = match request {
        Ok(request) => request,
        Err(e) => return Probe::Failed(e.to_string()),
    };
    match client
        .batch_write_item()
        .request_items(table, vec![request])
        .send()
        .await
    {
        Ok(_) => Probe::Permitted,
        Err(e) => classify(e),
    }
}

/// Runs every check of the maintenance role.
pub async fn run_maintenance(config: &MaintenanceConfig) -> Vec<Check> {
    let options = ConnectOptions::default();
    let plan = &config.plan;
    let mut checks = Vec::new();
    let opens = "maintenance opens the manifest table";
    match MaintenanceContext::open(plan, &config.cluster_id, &options).await {
        Ok(context) => {
            checks.push(Check::new(opens, true, "its marker names this cluster"));
            let tables = context.engine().list_tables().await;
            let tables = tables.map(|t| format!("{} tables", t.len()));
            checks.push(Check::of("maintenance lists the warehouse", tables));
        }
        Err(e) => checks.push(Check::of(opens, Err::<String, _>(e))),
    }
    checks.push(Check::new(
        "maintenance holds no registry name",
        true,
        "the maintenance plan has no registry (by type)",
    ));
    let client = AwsConnection::new(plan.aws(), &options).await.dynamodb();
    let table = plan.manifests().as_str();
    let put = probe_write(&client, table, MANIFEST_KEY, Write::PutItem).await;
    let batch = probe_batch_delete(&client, table).await;
    for (what, probe) in [("PutItem", put), ("BatchWriteItem delete", batch)] {
        let name = format!("maintenance may write {table} ({what})");
        checks.push(match probe {
            Probe::Permitted => Check::new(name, true, "permitted (nothing changed)"),
            Probe::Refused(why) => Check::new(name, false, format!("AccessDenied: {why}")),
            Probe::Failed(why) => Check::new(name, false, why),
        });
    }
    checks
}

/// Runs every check of the configured role.
pub async fn run(config: &RuntimeConfig) -> Vec<Check> {
    let options = ConnectOptions::default();
    let cluster = config.cluster_id.as_deref();
    let mut checks = Vec::new();
    match &config.plan {
        RolePlan::Query(plan) => {
            let opened = QueryContext::open(plan, cluster, &options).await;
            let opens = "query opens its stores read-only";
            match opened {
                Ok(context) => {
                    let marker = "the manifest table's marker names this cluster";
                    checks.push(Check::new(opens, true, marker));
                    let tables = context.engine().list_tables().await;
                    let tables = tables.map(|t| format!("{} tables", t.len()));
                    checks.push(Check::of("query reads the warehouse", tables));
                }
                Err(e) => checks.push(Check::of(opens, Err::<String, _>(e))),
            }
            checks.push(Check::new(
                "query holds no registry name",
                true,
                "the query plan has no registry (by type)",
            ));
            if let (ManifestStore::DynamoDb { table }, Some(aws)) = (plan.manifests(), plan.aws()) {
                let client = AwsConnection::new(aws, &options).await.dynamodb();
                for write in WRITES {
                    let name = format!("query is refused writes to {table} ({write:?})");
                    checks.push(match probe_write(&client, table.as_str(), MANIFEST_KEY, write).await {
                        Probe::Refused(why) => Check::new(name, true, format!("AccessDenied: {why}")),
                        Probe::Permitted => Check::new(
                            name,
                            false,
                            format!("IAM permits query's credentials to write the manifest table ({write:?})"),
                        ),
                        Probe::Failed(why) => Check::new(name, false, why),
                    });
                }
            }
        }
        RolePlan::Metadata(plan) => {
            let opens = "metadata opens both stores";
            match MetadataContext::open(plan, cluster, &options).await {
                Ok(context) => {
                    let markers = format!("both markers name cluster {}", context.cluster_id());
                    checks.push(Check::new(opens, true, markers));
                    let namespaces = context.registry().list_namespaces().await;
                    let namespaces = namespaces.map(|n| format!("{} namespaces", n.len()));
                    checks.push(Check::of("metadata reads the registry", namespaces));
                }
                Err(e) => checks.push(Check::of(opens, Err::<String, _>(e))),
            }
            if let Some(aws) = plan.aws() {
                let client = AwsConnection::new(aws, &options).await.dynamodb();
                let mut tables = Vec::new();
                if let RegistryStore::DynamoDb { table } = plan.registry() {
                    tables.push((table.as_str().to_owned(), REGISTRY_KEY));
                }
                if let ManifestStore::DynamoDb { table } = plan.manifests() {
                    tables.push((table.as_str().to_owned(), MANIFEST_KEY));
                }
                for (table, keys) in tables {
                    for write in WRITES {
                        let name = format!("metadata may write {table} ({write:?})");
                        checks.push(match probe_write(&client, &table, keys, write).await {
                            Probe::Permitted => {
                                Check::new(name, true, "permitted (nothing written)")
                            }
                            Probe::Refused(why) => {
                                Check::new(name, false, format!("AccessDenied: {why}"))
                            }
                            Probe::Failed(why) => Check::new(name, false, why),
                        });
                    }
                }
            }
        }
    }
    checks
}
