//! The verify: every segment of the legacy table scanned again, page by page (nothing but
//! digests, counts and pointers is kept, so memory does not grow with the table), each page's
//! copied items looked up in the split tables and compared.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Select};
use futures::future::BoxFuture;
use lake_common::schema::Authority;

use super::copy::destination;
use super::legacy::{self, Item, LegacyItem, SetDigest};
use super::{APPROVE, Consent, MigrationError, SEGMENTS, Tables, aws, failed, recopy, scan};
use crate::crd::{Approval, MigrationPhase, MigrationStatus};

/// Problems quoted in the message (all are counted).
const QUOTED: usize = 3;

/// What one full scan of one segment found.
#[derive(Default)]
pub(super) struct SegmentScan {
    pub digest: SetDigest,
    pub items: i64,
    manifest_items: i64,
    registry_items: i64,
    pointers: Vec<(String, i64)>,
    problems: Problems,
}

#[derive(Default)]
struct Problems {
    quoted: Vec<String>,
    count: usize,
}

impl Problems {
    fn push(&mut self, problem: String) {
        self.count += 1;
        if self.quoted.len() < QUOTED {
            self.quoted.push(problem);
        }
    }

    fn extend(&mut self, other: Problems) {
        self.count += other.count;
        for p in other.quoted {
            if self.quoted.len() < QUOTED {
                self.quoted.push(p);
            }
        }
    }
}

/// Scans `segment`; with `compare`, checks each page's copied items in the split tables.
async fn scan_segment(
    dynamodb: &Client,
    tables: &Tables,
    segment: i32,
    compare: bool,
) -> Result<SegmentScan, MigrationError> {
    let mut scan = SegmentScan::default();
    let mut start = None;
    loop {
        let (items, next) = scan::page(dynamodb, &tables.source, segment, start.as_ref()).await?;
        let mut expected = Vec::new();
        for item in &items {
            scan.digest.add(item);
            scan.items += 1;
            match legacy::classify(item) {
                Ok(LegacyItem::Pointer { dataset, latest }) => {
                    scan.pointers.push((dataset, latest));
                }
                Ok(classified) => {
                    if let Some((table, key, item)) = destination(tables, &classified) {
                        match classified {
                            LegacyItem::Registry(_) => scan.registry_items += 1,
                            _ => scan.manifest_items += 1,
                        }
                        expected.push((table.to_owned(), key, item));
                    }
                }
                // Added since the copy (which fails on it): the changed digest says so too.
                Err(e) => scan.problems.push(e.to_string()),
            }
        }
        if compare {
            mismatches(dynamodb, tables, &expected, &mut scan.problems).await?;
        }
        match next {
            Some(next) => start = Some(next),
            None => return Ok(scan),
        }
    }
}

pub(super) async fn scan_all(
    dynamodb: &Client,
    tables: &Tables,
    compare: bool,
) -> Result<Vec<SegmentScan>, MigrationError> {
    let scans: Vec<BoxFuture<'_, Result<SegmentScan, MigrationError>>> = (0..SEGMENTS)
        .map(|segment| {
            Box::pin(scan_segment(dynamodb, tables, segment, compare)) as BoxFuture<'_, _>
        })
        .collect();
    futures::future::try_join_all(scans).await
}

/// The digest of the whole source, from every segment's scan.
pub(super) fn merged(scans: Vec<SegmentScan>) -> SetDigest {
    let mut digest = SetDigest::default();
    for scan in scans {
        digest.merge(scan.digest);
    }
    digest
}

/// Segments whose content differs from what the copy read.
pub(super) fn changed(status: &MigrationStatus, scans: &[SegmentScan]) -> Vec<i32> {
    scans
        .iter()
        .zip(&status.segments)
        .filter(|(scan, seg)| scan.digest.hex() != seg.digest)
        .map(|(_, seg)| seg.segment)
        .collect()
}

/// Items of `table` but its marker (`key` = `marker`) and lake's own rows (`key` starting with
/// `__lake__/`: the maintenance leases a pass writes into the manifest table, which may run while
/// a migration waits for its approval).
async fn count(
    dynamodb: &Client,
    table: &str,
    key: &str,
    marker: &str,
) -> Result<i64, MigrationError> {
    let mut total = 0i64;
    let mut start = None;
    loop {
        let page = dynamodb
            .scan()
            .table_name(table)
            .select(Select::Count)
            .filter_expression("#k <> :m AND NOT begins_with(#k, :own)")
            .expression_attribute_names("#k", key)
            .expression_attribute_values(":m", AttributeValue::S(marker.to_owned()))
            .expression_attribute_values(":own", AttributeValue::S("__lake__/".to_owned()))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(aws("Scan", table))?;
        total += i64::from(page.count);
        match page.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return Ok(total),
        }
    }
}

/// Items of `tables` but their markers: (manifest, registry).
pub(super) async fn split_items(
    dynamodb: &Client,
    tables: &Tables,
) -> Result<(i64, i64), MigrationError> {
    Ok((
        count(
            dynamodb,
            &tables.manifest,
            "base_uri",
            Authority::Manifests.marker_key().hash,
        )
        .await?,
        count(
            dynamodb,
            &tables.registry,
            "pk",
            Authority::Registry.marker_key().hash,
        )
        .await?,
    ))
}

/// Records every item of `expected` whose key holds nothing, or something else, in its table.
async fn mismatches(
    dynamodb: &Client,
    tables: &Tables,
    expected: &[(String, Item, Item)],
    problems: &mut Problems,
) -> Result<(), MigrationError> {
    for chunk in expected.chunks(100) {
        let mut want: HashMap<(String, u128), (String, u128)> = HashMap::new();
        let mut request = HashMap::<String, Vec<Item>>::new();
        for (table, key, item) in chunk {
            want.insert(
                (table.clone(), legacy::item_digest(key)),
                (legacy::describe_key(key), legacy::item_digest(item)),
            );
            request.entry(table.clone()).or_default().push(key.clone());
        }
        let mut pending: HashMap<String, KeysAndAttributes> = request
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
                        source: Some(Box::new(e)),
                    })?;
                Ok((table, keys))
            })
            .collect::<Result<_, MigrationError>>()?;
        let mut attempt = 0u32;
        while !pending.is_empty() {
            if attempt > 0 {
                // Throttled: back off before asking again for what was left.
                let wait = 50u64.saturating_mul(1 << attempt.min(5));
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            attempt += 1;
            let got = dynamodb
                .batch_get_item()
                .set_request_items(Some(pending))
                .send()
                .await
                .map_err(aws("BatchGetItem", "the split tables"))?;
            for (table, items) in got.responses.unwrap_or_default() {
                let key_names = if table == tables.registry {
                    legacy::REGISTRY_KEY
                } else {
                    legacy::MANIFEST_KEY
                };
                for item in items {
                    let key = legacy::key_of(&item, key_names);
                    if let Some((name, digest)) =
                        want.remove(&(table.clone(), legacy::item_digest(&key)))
                        && digest != legacy::item_digest(&item)
                    {
                        problems.push(format!("{name} in {table} differs from the legacy item"));
                    }
                }
            }
            pending = got.unprocessed_keys.unwrap_or_default();
        }
        for ((table, _), (name, _)) in want {
            problems.push(format!("{name} is missing from {table}"));
        }
    }
    Ok(())
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

pub(super) async fn verify(
    dynamodb: &Client,
    tables: &Tables,
    consent: &Consent,
    status: MigrationStatus,
) -> Result<MigrationStatus, MigrationError> {
    let scans = scan_all(dynamodb, tables, true).await?;
    let changed = changed(&status, &scans);
    if !changed.is_empty() {
        return Ok(recopy(status, &changed, MigrationPhase::Verifying));
    }
    let mut problems = Problems::default();
    let (manifest_items, registry_items) = scans.iter().fold((0, 0), |(m, r), s| {
        (m + s.manifest_items, r + s.registry_items)
    });
    let (have_manifest, have_registry) = split_items(dynamodb, tables).await?;
    for (table, what, have, want) in [
        (&tables.manifest, "manifest", have_manifest, manifest_items),
        (&tables.registry, "registry", have_registry, registry_items),
    ] {
        if have != want {
            problems.push(format!(
                "{table} holds {have} {what} items besides its marker, the legacy table {want}"
            ));
        }
    }
    let mut datasets = 0usize;
    let mut status = status;
    let mut digest = SetDigest::default();
    for scan in scans {
        digest.merge(scan.digest);
        status.total_items = Some(status.total_items.unwrap_or_default() + scan.items);
        problems.extend(scan.problems);
        for (dataset, latest) in &scan.pointers {
            datasets += 1;
            match newest(dynamodb, &tables.manifest, dataset).await? {
                Some((version, true)) if version == *latest => {}
                Some((version, _)) => problems.push(format!(
                    "dataset {dataset:?}: the legacy pointer says version {latest}, the \
                     manifest table's newest row is version {version} (or names no manifest \
                     file)"
                )),
                None => problems.push(format!(
                    "dataset {dataset:?}: the legacy pointer says version {latest}, the \
                     manifest table has no row"
                )),
            }
        }
    }
    if problems.count > 0 {
        return Ok(failed(
            status,
            MigrationPhase::Verifying,
            format!(
                "verify found {} problem(s), e.g. {}; nothing was cut over and the workloads \
                 are unchanged",
                problems.count,
                problems.quoted.join("; ")
            ),
        ));
    }
    let verified = digest.hex();
    let summary = format!(
        "verified: {} items copied of {} read, {datasets} datasets at their latest versions, \
         digest {verified}",
        status.copied_items,
        status.total_items.unwrap_or_default(),
    );
    status.verified_digest = Some(verified.clone());
    status.phase = match consent.approval {
        Approval::Manual => {
            status.message = Some(format!(
                "{summary}. Stop every lake v1 writer, then approve the cutover: kubectl \
                 annotate lake {} -n {} --overwrite {APPROVE}={verified}",
                consent.lake.1, consent.lake.0
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
