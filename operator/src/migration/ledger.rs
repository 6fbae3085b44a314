//! The operator's own record of a migration: what it decided, kept where only it writes.
//!
//! `status.migration` is the API, and whoever may patch a LakeCluster's status can write it:
//! a forged `CuttingOver` or `Complete` would point the workloads at tables nobody verified,
//! and a forged `AwaitingApproval` with a digest of the forger's choosing would take an
//! approval for something else. So the steps that matter are also recorded on the manifest
//! table's authority marker (written by the operator when it provisioned the table; the
//! workloads only read it), and a phase is trusted only when this record agrees:
//! - `migration_approval`: the approval mode, recorded when the migration starts and fixed from
//!   then on (`spec.migration.approval` switched to `Automatic` while a migration awaits its
//!   approval changes nothing);
//! - `migration_verified`: the digest of the source the verify found copied exactly;
//! - `migration_cutover`: the digest that was cut over (after the approval was checked against
//!   a fresh scan of the source, for `Manual`).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use lake_common::schema::Authority;

use super::{MigrationError, aws};
use crate::crd::Approval;

const APPROVAL: &str = "migration_approval";
const VERIFIED: &str = "migration_verified";
const CUTOVER: &str = "migration_cutover";

/// What the operator recorded of a migration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    pub approval: Option<Approval>,
    pub verified: Option<String>,
    pub cutover: Option<String>,
}

/// A recorded step.
#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    Verified,
    Cutover,
}

fn marker_key() -> HashMap<String, AttributeValue> {
    crate::apply::tables::marker_key(Authority::Manifests)
}

fn approval_of(text: &str) -> Option<Approval> {
    match text {
        "Manual" => Some(Approval::Manual),
        "Automatic" => Some(Approval::Automatic),
        _ => None,
    }
}

fn text(approval: Approval) -> &'static str {
    match approval {
        Approval::Manual => "Manual",
        Approval::Automatic => "Automatic",
    }
}

/// The record on `manifest`'s marker (empty if nothing was recorded).
pub(super) async fn read(dynamodb: &Client, manifest: &str) -> Result<Ledger, MigrationError> {
    let item = dynamodb
        .get_item()
        .table_name(manifest)
        .set_key(Some(marker_key()))
        .consistent_read(true)
        .send()
        .await
        .map_err(aws("GetItem", manifest))?
        .item
        .unwrap_or_default();
    let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    Ok(Ledger {
        approval: text(APPROVAL).as_deref().and_then(approval_of),
        verified: text(VERIFIED),
        cutover: text(CUTOVER),
    })
}

/// Records the approval mode once; returns the mode recorded (an earlier pass's, if any).
pub(super) async fn record_approval(
    dynamodb: &Client,
    manifest: &str,
    approval: Approval,
) -> Result<Approval, MigrationError> {
    let written = dynamodb
        .update_item()
        .table_name(manifest)
        .set_key(Some(marker_key()))
        .update_expression("SET #a = :a")
        .condition_expression("attribute_exists(#h) AND attribute_not_exists(#a)")
        .expression_attribute_names("#a", APPROVAL)
        .expression_attribute_names("#h", Authority::Manifests.key_schema().hash.name)
        .expression_attribute_values(":a", AttributeValue::S(text(approval).to_owned()))
        .send()
        .await;
    match written {
        Ok(_) => Ok(approval),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            read(dynamodb, manifest)
                .await?
                .approval
                .ok_or_else(|| MigrationError::Aws {
                    operation: "UpdateItem",
                    table: manifest.to_owned(),
                    detail: "the manifest table's authority marker is missing".into(),
                    source: None,
                })
        }
        Err(e) => Err(aws("UpdateItem", manifest)(e)),
    }
}

/// Records `step` for `digest` (before the status says so).
pub(super) async fn record(
    dynamodb: &Client,
    manifest: &str,
    step: Step,
    digest: &str,
) -> Result<(), MigrationError> {
    let name = match step {
        Step::Verified => VERIFIED,
        Step::Cutover => CUTOVER,
    };
    dynamodb
        .update_item()
        .table_name(manifest)
        .set_key(Some(marker_key()))
        .update_expression("SET #s = :d")
        .condition_expression("attribute_exists(#h)")
        .expression_attribute_names("#s", name)
        .expression_attribute_names("#h", Authority::Manifests.key_schema().hash.name)
        .expression_attribute_values(":d", AttributeValue::S(digest.to_owned()))
        .send()
        .await
        .map_err(aws("UpdateItem", manifest))?;
    Ok(())
}
