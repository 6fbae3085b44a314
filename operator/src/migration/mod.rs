//! Migration from a lake v1 shared table (`spec.migration`) into the cluster's split tables: a
//! resumable state machine whose phase and per-segment checkpoints are saved in
//! `status.migration` before and during each step, so a killed operator (or a new leader)
//! resumes where it stopped.
//!
//! `Pending → Copying → Verifying → AwaitingApproval (Manual) → CuttingOver → Complete`, or
//! `Failed` naming the phase. The legacy table is only ever read (Scan, never a write); the
//! workloads are not pointed at the split tables until `CuttingOver`.
//!
//! - **copy**: a parallel scan of [`SEGMENTS`] segments, pages of [`PAGE`] items, a checkpoint
//!   per page; manifest rows and converted registry rows are written with conditional puts that
//!   never overwrite (an item already there with the same content counts as copied).
//! - **verify**: every segment scanned again; a segment whose digest differs from what the copy
//!   read has changed since (a v1 writer is still running): it is copied again. Otherwise every
//!   copied item must be in the split tables with the same content, the split tables must hold
//!   nothing else, and each dataset's newest version must be its legacy pointer's.
//! - **approval** (`Manual`): the annotation [`APPROVE`] set to the verified digest.
//! - **cutover**: the legacy table is checked unchanged once more, then the workloads roll out.

pub mod legacy;

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Select};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Mutex;

use crate::crd::{Approval, MigrationPhase, MigrationStatus, ScanKey, SegmentStatus};
use legacy::{Item, LegacyItem, SetDigest};

/// The annotation that approves a `Manual` migration's cutover: its value must be
/// `status.migration.verifiedDigest` (so it approves exactly what was verified).
pub const APPROVE: &str = "lake.dev/approve-migration";
/// Segments of the parallel scan.
pub const SEGMENTS: i32 = 4;
/// Items per scan page (one checkpoint each).
pub const PAGE: i32 = 500;
/// Conditional puts in flight per segment.
const WRITERS: usize = 16;
/// Rounds of copying changed segments again before giving up on a legacy table that keeps
/// changing.
const MAX_RECOPIES: i64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("DynamoDB {operation} on {table}: {detail}")]
    Aws {
        operation: &'static str,
        table: String,
        detail: String,
    },
    #[error(transparent)]
    Legacy(#[from] legacy::LegacyError),
    #[error("saving the migration's checkpoint: {source}")]
    Checkpoint {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn aws<E, R>(
    operation: &'static str,
    table: &str,
) -> impl FnOnce(aws_sdk_dynamodb::error::SdkError<E, R>) -> MigrationError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let table = table.to_owned();
    move |e| match crate::apply::error::aws(operation, &table, e) {
        crate::apply::ApplyError::Aws { detail, .. } => MigrationError::Aws {
            operation,
            table,
            detail,
        },
        other => MigrationError::Aws {
            operation,
            table,
            detail: other.to_string(),
        },
    }
}

/// Where `status.migration` is saved (reconcile patches the LakeCluster's status).
pub trait Checkpoint: Send + Sync {
    fn save<'a>(&'a self, status: &'a MigrationStatus)
    -> BoxFuture<'a, Result<(), MigrationError>>;
}

/// The tables of one migration.
#[derive(Debug, Clone)]
pub struct Tables {
    pub source: String,
    pub manifest: String,
    pub registry: String,
}

/// What the user decided: the spec's approval mode and the annotation's value.
#[derive(Debug, Clone)]
pub struct Consent {
    pub approval: Approval,
    pub approved_digest: Option<String>,
}

/// Runs the migration from `status` as far as it can go in this pass: to `AwaitingApproval`,
/// `CuttingOver` (the caller rolls the workloads out and then calls [`complete`]), `Complete` or
/// `Failed`. Every phase change and every copied page is saved first.
pub async fn advance(
    dynamodb: &Client,
    tables: &Tables,
    consent: &Consent,
    status: MigrationStatus,
    checkpoint: &dyn Checkpoint,
) -> Result<MigrationStatus, MigrationError> {
    let mut status = status;
    status.source_table = Some(tables.source.clone());
    loop {
        let next = match status.phase {
            MigrationPhase::Pending => {
                status.segments = (0..SEGMENTS)
                    .map(|segment| SegmentStatus {
                        segment,
                        digest: SetDigest::default().hex(),
                        ..Default::default()
                    })
                    .collect();
                Some(MigrationPhase::Copying)
            }
            MigrationPhase::Copying => {
                status = copy(dynamodb, tables, status, checkpoint).await?;
                Some(MigrationPhase::Verifying)
            }
            MigrationPhase::Verifying => {
                status = verify(dynamodb, tables, consent, status).await?;
                None
            }
            MigrationPhase::AwaitingApproval => match &consent.approved_digest {
                Some(d) if Some(d) == status.verified_digest.as_ref() => {
                    Some(MigrationPhase::CuttingOver)
                }
                Some(d) => {
                    status.message = Some(format!(
                        "{APPROVE} is {d:?}, but the verified copy's digest is {:?}: set it to \
                         that value to cut over",
                        status.verified_digest.as_deref().unwrap_or_default()
                    ));
                    return Ok(status);
                }
                None => return Ok(status),
            },
            MigrationPhase::CuttingOver => {
                // The legacy table must still be what was verified (and approved).
                let changed = changed_segments(dynamodb, tables, &status).await?;
                if changed.is_empty() {
                    return Ok(status);
                }
                status = recopy(status, &changed);
                None
            }
            MigrationPhase::Complete | MigrationPhase::Failed => return Ok(status),
        };
        if let Some(phase) = next {
            status.phase = phase;
        }
        checkpoint.save(&status).await?;
    }
}

/// After the workloads rolled out on the split tables.
pub fn complete(mut status: MigrationStatus) -> MigrationStatus {
    status.phase = MigrationPhase::Complete;
    status.message = Some(format!(
        "{} items copied and verified; the workloads serve the split tables",
        status.copied_items
    ));
    status
}

/// `status` as a merge patch's value: every optional field present, `null` when absent (so a
/// cleared field is cleared on the server too).
pub fn patch_value(status: &MigrationStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        for field in [
            "sourceTable",
            "totalItems",
            "message",
            "segments",
            "verifiedDigest",
            "failedIn",
            "recopies",
        ] {
            fields
                .entry(field.to_owned())
                .or_insert(serde_json::Value::Null);
        }
    }
    value
}

fn progress(status: &mut MigrationStatus) {
    status.copied_items = status.segments.iter().map(|s| s.copied).sum();
    let scanned: i64 = status.segments.iter().map(|s| s.scanned).sum();
    let done = status.segments.iter().filter(|s| s.done).count();
    status.message = Some(format!(
        "{} copied of {scanned} read; {done}/{} segments done",
        status.copied_items,
        status.segments.len()
    ));
}

fn scan_key(key: &Item) -> Option<ScanKey> {
    Some(ScanKey {
        base_uri: key.get("base_uri")?.as_s().ok()?.clone(),
        version: key.get("version")?.as_n().ok()?.clone(),
    })
}

fn start_key(key: &ScanKey) -> Item {
    Item::from([
        (
            "base_uri".to_owned(),
            AttributeValue::S(key.base_uri.clone()),
        ),
        ("version".to_owned(), AttributeValue::N(key.version.clone())),
    ])
}

/// One page of one segment of the legacy table (Scan: the only call ever made on it).
async fn scan_page(
    dynamodb: &Client,
    source: &str,
    segment: i32,
    start: Option<&ScanKey>,
) -> Result<(Vec<Item>, Option<ScanKey>), MigrationError> {
    let page = dynamodb
        .scan()
        .table_name(source)
        .segment(segment)
        .total_segments(SEGMENTS)
        .limit(PAGE)
        .consistent_read(true)
        .set_exclusive_start_key(start.map(start_key))
        .send()
        .await
        .map_err(aws("Scan", source))?;
    let next = page.last_evaluated_key().and_then(scan_key);
    Ok((page.items.unwrap_or_default(), next))
}

/// Where a legacy item goes, and its key there.
fn destination<'a>(tables: &'a Tables, item: &LegacyItem) -> Option<(&'a str, Item, Item)> {
    let key = |item: &Item, names: [&str; 2]| -> Item {
        names
            .iter()
            .filter_map(|n| item.get(*n).map(|v| ((*n).to_owned(), v.clone())))
            .collect()
    };
    match item {
        LegacyItem::Manifest(i) => Some((
            tables.manifest.as_str(),
            key(i, ["base_uri", "version"]),
            i.clone(),
        )),
        LegacyItem::Registry(i) => {
            Some((tables.registry.as_str(), key(i, ["pk", "sk"]), i.clone()))
        }
        LegacyItem::Pointer { .. } | LegacyItem::Marker => None,
    }
}

/// Writes `item` unless its key is taken; an identical item there counts as written. Registry
/// items may replace an older copy once the legacy table changed under a copy (`overwrite`):
/// nothing but the migration writes the split tables before cutover.
async fn put(
    dynamodb: &Client,
    table: &str,
    key: Item,
    item: Item,
    overwrite: bool,
) -> Result<bool, MigrationError> {
    let first = key.keys().next().cloned().unwrap_or_default();
    let mut request = dynamodb
        .put_item()
        .table_name(table)
        .set_item(Some(item.clone()));
    if !overwrite {
        request = request
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", first);
    }
    match request.send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            let existing = dynamodb
                .get_item()
                .table_name(table)
                .set_key(Some(key))
                .consistent_read(true)
                .send()
                .await
                .map_err(aws("GetItem", table))?;
            // A different item under the key is left alone: verify reports it.
            Ok(existing
                .item
                .is_some_and(|e| legacy::item_digest(&e) == legacy::item_digest(&item)))
        }
        Err(e) => Err(aws("PutItem", table)(e)),
    }
}

async fn copy(
    dynamodb: &Client,
    tables: &Tables,
    status: MigrationStatus,
    checkpoint: &dyn Checkpoint,
) -> Result<MigrationStatus, MigrationError> {
    let overwrite = status.recopies > 0;
    let shared = Arc::new(Mutex::new(status));
    // Boxed: a stream of borrowing futures is not provably Send to the controller otherwise.
    let segments: Vec<BoxFuture<'_, Result<(), MigrationError>>> = (0..SEGMENTS)
        .map(|segment| {
            Box::pin(copy_segment(
                dynamodb, tables, segment, overwrite, &shared, checkpoint,
            )) as BoxFuture<'_, _>
        })
        .collect();
    futures::future::try_join_all(segments).await?;
    let status = shared.lock().await.clone();
    Ok(status)
}

async fn copy_segment(
    dynamodb: &Client,
    tables: &Tables,
    segment: i32,
    overwrite: bool,
    shared: &Mutex<MigrationStatus>,
    checkpoint: &dyn Checkpoint,
) -> Result<(), MigrationError> {
    loop {
        let (done, start, digest) = {
            let status = shared.lock().await;
            let seg = &status.segments[segment as usize];
            (seg.done, seg.last_key.clone(), seg.digest.clone())
        };
        if done {
            return Ok(());
        }
        let (items, next) = scan_page(dynamodb, &tables.source, segment, start.as_ref()).await?;
        let mut digest = SetDigest::parse(&digest).unwrap_or_default();
        let mut writes = Vec::new();
        for item in &items {
            digest.add(item);
            if let Some(write) = destination(tables, &legacy::classify(item)?) {
                writes.push(write);
            }
        }
        let puts: Vec<BoxFuture<'_, Result<bool, MigrationError>>> = writes
            .into_iter()
            .map(|(table, key, item)| {
                Box::pin(put(dynamodb, table, key, item, overwrite)) as BoxFuture<'_, _>
            })
            .collect();
        let written: Vec<bool> = futures::stream::iter(puts)
            .buffer_unordered(WRITERS)
            .try_collect()
            .await?;
        let copied = written.into_iter().filter(|w| *w).count() as i64;
        let mut status = shared.lock().await;
        let seg = &mut status.segments[segment as usize];
        seg.scanned += items.len() as i64;
        seg.copied += copied;
        seg.digest = digest.hex();
        seg.done = next.is_none();
        seg.last_key = next;
        progress(&mut status);
        // Saved under the lock: checkpoints are written in order.
        checkpoint.save(&status).await?;
    }
}

/// What one full scan of one segment says.
#[derive(Default)]
struct SegmentScan {
    digest: SetDigest,
    expected: Vec<(String, Item, Item)>,
    pointers: Vec<(String, i64)>,
    items: i64,
}

async fn scan_segment(
    dynamodb: &Client,
    tables: &Tables,
    segment: i32,
) -> Result<SegmentScan, MigrationError> {
    let mut scan = SegmentScan::default();
    let mut start = None;
    loop {
        let (items, next) = scan_page(dynamodb, &tables.source, segment, start.as_ref()).await?;
        for item in &items {
            scan.digest.add(item);
            scan.items += 1;
            let classified = legacy::classify(item)?;
            if let LegacyItem::Pointer { dataset, latest } = &classified {
                scan.pointers.push((dataset.clone(), *latest));
            }
            if let Some((table, key, item)) = destination(tables, &classified) {
                scan.expected.push((table.to_owned(), key, item));
            }
        }
        match next {
            Some(next) => start = Some(next),
            None => return Ok(scan),
        }
    }
}

async fn scan_all(dynamodb: &Client, tables: &Tables) -> Result<Vec<SegmentScan>, MigrationError> {
    let scans: Vec<BoxFuture<'_, Result<SegmentScan, MigrationError>>> = (0..SEGMENTS)
        .map(|segment| Box::pin(scan_segment(dynamodb, tables, segment)) as BoxFuture<'_, _>)
        .collect();
    futures::future::try_join_all(scans).await
}

/// Segments whose content differs from what the copy read.
async fn changed_segments(
    dynamodb: &Client,
    tables: &Tables,
    status: &MigrationStatus,
) -> Result<Vec<i32>, MigrationError> {
    let scans = scan_all(dynamodb, tables).await?;
    Ok(changed(status, &scans))
}

fn changed(status: &MigrationStatus, scans: &[SegmentScan]) -> Vec<i32> {
    scans
        .iter()
        .zip(&status.segments)
        .filter(|(scan, seg)| scan.digest.hex() != seg.digest)
        .map(|(_, seg)| seg.segment)
        .collect()
}

/// Back to `Copying` for `segments` (the legacy table changed under them), or `Failed` once it
/// kept changing for [`MAX_RECOPIES`] rounds.
fn recopy(mut status: MigrationStatus, segments: &[i32]) -> MigrationStatus {
    status.recopies += 1;
    status.verified_digest = None;
    if status.recopies > MAX_RECOPIES {
        return failed(
            status,
            MigrationPhase::Verifying,
            format!(
                "the legacy table changed during {MAX_RECOPIES} copies in a row (segments \
                 {segments:?}): stop every lake v1 writer, then delete and recreate the \
                 LakeCluster to start again"
            ),
        );
    }
    for seg in status.segments.iter_mut() {
        if segments.contains(&seg.segment) {
            *seg = SegmentStatus {
                segment: seg.segment,
                digest: SetDigest::default().hex(),
                ..Default::default()
            };
        }
    }
    status.phase = MigrationPhase::Copying;
    progress(&mut status);
    status.message = Some(format!(
        "the legacy table changed during the copy: segments {segments:?} are copied again"
    ));
    status
}

fn failed(mut status: MigrationStatus, phase: MigrationPhase, why: String) -> MigrationStatus {
    status.phase = MigrationPhase::Failed;
    status.failed_in = Some(phase);
    status.message = Some(why);
    status
}

/// Items of `table` besides its marker.
async fn count(dynamodb: &Client, table: &str) -> Result<i64, MigrationError> {
    let mut total = 0i64;
    let mut start = None;
    loop {
        let page = dynamodb
            .scan()
            .table_name(table)
            .select(Select::Count)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(aws("Scan", table))?;
        total += i64::from(page.count);
        match page.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return Ok(total - 1),
        }
    }
}

/// Items of `expected` whose key holds nothing or something else in its table.
async fn mismatches(
    dynamodb: &Client,
    tables: &Tables,
    expected: &[(String, Item, Item)],
) -> Result<Vec<String>, MigrationError> {
    let mut wrong = Vec::new();
    for chunk in expected.chunks(100) {
        let mut want: std::collections::HashMap<(String, u64), (String, u64)> = Default::default();
        let mut request = std::collections::HashMap::<String, Vec<Item>>::new();
        for (table, key, item) in chunk {
            want.insert(
                (table.clone(), legacy::item_digest(key)),
                (legacy::describe_key(key), legacy::item_digest(item)),
            );
            request.entry(table.clone()).or_default().push(key.clone());
        }
        let mut pending: std::collections::HashMap<String, KeysAndAttributes> = request
            .into_iter()
            .map(|(table, keys)| {
                let keys = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| MigrationError::Aws {
                        operation: "BatchGetItem",
                        table: table.clone(),
                        detail: e.to_string(),
                    })?;
                Ok((table, keys))
            })
            .collect::<Result<_, MigrationError>>()?;
        while !pending.is_empty() {
            let got = dynamodb
                .batch_get_item()
                .set_request_items(Some(pending))
                .send()
                .await
                .map_err(aws("BatchGetItem", "the split tables"))?;
            for (table, items) in got.responses.unwrap_or_default() {
                let key_names = if table == tables.registry {
                    ["pk", "sk"]
                } else {
                    ["base_uri", "version"]
                };
                for item in items {
                    let key: Item = key_names
                        .iter()
                        .filter_map(|n| item.get(*n).map(|v| ((*n).to_owned(), v.clone())))
                        .collect();
                    if let Some((name, digest)) =
                        want.remove(&(table.clone(), legacy::item_digest(&key)))
                        && digest != legacy::item_digest(&item)
                    {
                        wrong.push(format!("{name} in {table} differs from the legacy item"));
                    }
                }
            }
            pending = got.unprocessed_keys.unwrap_or_default();
        }
        wrong.extend(
            want.into_iter()
                .map(|((table, _), (name, _))| format!("{name} is missing from {table}")),
        );
    }
    Ok(wrong)
}

/// The newest version the manifest table holds for `dataset`, and whether that row names its
/// manifest file.
async fn newest(
    dynamodb: &Client,
    table: &str,
    dataset: &str,
) -> Result<Option<(i64, bool)>, MigrationError> {
    let page = dynamodb
        .query()
        .table_name(table)
        .key_condition_expression("base_uri = :d")
        .expression_attribute_values(":d", AttributeValue::S(dataset.to_owned()))
        .scan_index_forward(false)
        .limit(1)
        .consistent_read(true)
        .send()
        .await
        .map_err(aws("Query", table))?;
    Ok(page.items.unwrap_or_default().first().map(|item| {
        let version = item
            .get("version")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1);
        let path = item
            .get("path")
            .and_then(|v| v.as_s().ok())
            .is_some_and(|p| !p.is_empty());
        (version, path)
    }))
}

async fn verify(
    dynamodb: &Client,
    tables: &Tables,
    consent: &Consent,
    status: MigrationStatus,
) -> Result<MigrationStatus, MigrationError> {
    let scans = scan_all(dynamodb, tables).await?;
    let changed = changed(&status, &scans);
    if !changed.is_empty() {
        return Ok(recopy(status, &changed));
    }
    let expected: Vec<(String, Item, Item)> = scans
        .iter()
        .flat_map(|s| s.expected.iter().cloned())
        .collect();
    let mut problems = mismatches(dynamodb, tables, &expected).await?;
    for (table, what) in [
        (&tables.manifest, "manifest"),
        (&tables.registry, "registry"),
    ] {
        let want = expected.iter().filter(|(t, _, _)| t == table).count() as i64;
        let have = count(dynamodb, table).await?;
        if have != want {
            problems.push(format!(
                "{table} holds {have} {what} items besides its marker, the legacy table {want}"
            ));
        }
    }
    for (dataset, latest) in scans.iter().flat_map(|s| s.pointers.iter()) {
        match newest(dynamodb, &tables.manifest, dataset).await? {
            Some((version, true)) if version == *latest => {}
            Some((version, _)) => problems.push(format!(
                "dataset {dataset:?}: the legacy pointer says version {latest}, the manifest \
                 table's newest row is version {version} (or names no manifest file)"
            )),
            None => problems.push(format!(
                "dataset {dataset:?}: the legacy pointer says version {latest}, the manifest \
                 table has no row"
            )),
        }
    }
    if !problems.is_empty() {
        let n = problems.len();
        problems.truncate(3);
        return Ok(failed(
            status,
            MigrationPhase::Verifying,
            format!(
                "verify found {n} problem(s), e.g. {}; nothing was cut over and the workloads \
                 are unchanged",
                problems.join("; ")
            ),
        ));
    }
    let mut status = status;
    let digest = scans.iter().fold(0u64, |d, s| d.wrapping_add(s.digest.0));
    status.verified_digest = Some(SetDigest(digest).hex());
    status.total_items = Some(scans.iter().map(|s| s.items).sum());
    let datasets: usize = scans.iter().map(|s| s.pointers.len()).sum();
    let summary = format!(
        "verified: {} items copied of {} read, {datasets} datasets at their latest versions, \
         digest {}",
        status.copied_items,
        status.total_items.unwrap_or_default(),
        status.verified_digest.as_deref().unwrap_or_default()
    );
    status.phase = match consent.approval {
        Approval::Manual => {
            status.message = Some(format!(
                "{summary}; approve the cutover with kubectl annotate lake <name> \
                 {APPROVE}={}",
                status.verified_digest.as_deref().unwrap_or_default()
            ));
            MigrationPhase::AwaitingApproval
        }
        Approval::Automatic => {
            status.message = Some(summary);
            MigrationPhase::CuttingOver
        }
    };
    Ok(status)
}
