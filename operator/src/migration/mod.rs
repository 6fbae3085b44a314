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
//!   per page; manifest rows are written with conditional puts that never overwrite (an
//!   identical row already there counts as copied), registry rows as the source holds them.
//! - **verify**: every segment scanned again; a segment whose digest differs from what the copy
//!   read has changed since (a v1 writer is still running): it is copied again. Otherwise every
//!   copied item must be in the split tables with the same content, the split tables must hold
//!   nothing else, and each dataset's newest version must be its legacy pointer's.
//! - **approval** (`Manual`): the annotation [`APPROVE`] set to the verified digest.
//! - **cutover**: right after the verify (`Automatic`), or once the approval is given and the
//!   legacy table is checked unchanged since the verify (`Manual`), the workloads roll out.
//!
//! The approval mode, the verified digest and the cutover are also recorded where only the
//! operator writes ([`ledger`]): a status it did not record (patched by hand) is not trusted,
//! and the mode is fixed once the migration started.

mod copy;
pub mod fixture;
pub mod ledger;
pub mod legacy;
mod scan;
mod verify;

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;

use crate::crd::{Approval, MigrationPhase, MigrationStatus, SegmentStatus};
use legacy::SetDigest;

/// The annotation that approves a `Manual` migration's cutover: its value must be
/// `status.migration.verifiedDigest` (so it approves exactly what was verified).
pub const APPROVE: &str = "lake.dev/approve-migration";
/// Segments of the parallel scan.
pub const SEGMENTS: i32 = 4;
/// Items per scan page (one checkpoint each).
pub const PAGE: i32 = 1000;
/// How long one pass copies before it ends (the next resumes from the checkpoints), so a long
/// copy still lets pause, deletion and spec changes through.
const COPY_BUDGET: Duration = Duration::from_secs(120);
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
        #[source]
        source: Option<crate::apply::error::BoxError>,
    },
    #[error(transparent)]
    Legacy(#[from] legacy::LegacyError),
    #[error("saving the migration's checkpoint: {source}")]
    Checkpoint {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub(crate) fn aws<E, R>(
    operation: &'static str,
    table: &str,
) -> impl FnOnce(aws_sdk_dynamodb::error::SdkError<E, R>) -> MigrationError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let table = table.to_owned();
    move |e| match crate::apply::error::aws(operation, &table, e) {
        crate::apply::ApplyError::Aws { detail, source, .. } => MigrationError::Aws {
            operation,
            table,
            detail,
            source,
        },
        other => MigrationError::Aws {
            operation,
            table,
            detail: other.to_string(),
            source: Some(Box::new(other)),
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

/// What the user decided: the spec's approval mode and the annotation's value, and the
/// cluster's (namespace, name) for the approval command.
#[derive(Debug, Clone)]
pub struct Consent {
    pub approval: Approval,
    pub approved_digest: Option<String>,
    pub lake: (String, String),
}

fn fresh_segments() -> Vec<SegmentStatus> {
    (0..SEGMENTS)
        .map(|segment| SegmentStatus {
            segment,
            digest: SetDigest::default().hex(),
            ..Default::default()
        })
        .collect()
}

/// Whether the checkpoints are this version's (one per segment, in order).
fn segments_match(status: &MigrationStatus) -> bool {
    status.segments.len() == SEGMENTS as usize
        && status
            .segments
            .iter()
            .enumerate()
            .all(|(i, s)| s.segment as usize == i)
}

/// Why the migration cannot start, if it cannot: the source must be a lake v1 table, and the
/// split tables must hold nothing yet (a migration never copies into a lake in use).
async fn start_problem(
    dynamodb: &Client,
    tables: &Tables,
) -> Result<Option<String>, MigrationError> {
    if let Some(problem) = scan::schema_problem(dynamodb, &tables.source).await? {
        return Ok(Some(format!("{}: {problem}", tables.source)));
    }
    let (manifest, registry) = verify::split_items(dynamodb, tables).await?;
    if manifest > 0 || registry > 0 {
        return Ok(Some(format!(
            "the split tables already hold data ({} holds {manifest} items, {} {registry}): a \
             migration copies only into new, empty tables",
            tables.manifest, tables.registry
        )));
    }
    Ok(None)
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
    let mut recorded = ledger::read(dynamodb, &tables.manifest).await?;
    if adoptable(&status, &recorded) {
        let (manifest, registry) = verify::split_items(dynamodb, tables).await?;
        if manifest > 0 || registry > 0 {
            recorded = adopt(dynamodb, tables, &status, consent).await?;
        }
    }
    let (mut status, consent) = trust(status, &recorded, consent);
    status.source_table = Some(tables.source.clone());
    let deadline = Instant::now() + COPY_BUDGET;
    loop {
        let next = match status.phase {
            MigrationPhase::Pending => match start_problem(dynamodb, tables).await? {
                Some(problem) => {
                    status = failed(status, MigrationPhase::Pending, problem);
                    None
                }
                None => {
                    ledger::record_approval(dynamodb, &tables.manifest, consent.approval).await?;
                    status.segments = fresh_segments();
                    Some(MigrationPhase::Copying)
                }
            },
            // Checkpoints of another layout (an operator of another version wrote them): the
            // copy starts over; its writes are idempotent.
            MigrationPhase::Copying | MigrationPhase::Verifying if !segments_match(&status) => {
                status.segments = fresh_segments();
                Some(MigrationPhase::Copying)
            }
            MigrationPhase::Copying => {
                status = copy::copy(dynamodb, tables, status, checkpoint, deadline).await?;
                if status.phase == MigrationPhase::Failed {
                    return Ok(status);
                }
                if !status.segments.iter().all(|s| s.done) {
                    // Out of this pass's time: the next pass resumes.
                    return Ok(status);
                }
                Some(MigrationPhase::Verifying)
            }
            MigrationPhase::Verifying => {
                status = verify::verify(dynamodb, tables, &consent, status).await?;
                // Recorded before the status says so.
                if let (
                    Some(digest),
                    MigrationPhase::AwaitingApproval | MigrationPhase::CuttingOver,
                ) = (&status.verified_digest, status.phase)
                {
                    ledger::record(dynamodb, &tables.manifest, ledger::Step::Verified, digest)
                        .await?;
                    if status.phase == MigrationPhase::CuttingOver {
                        ledger::record(dynamodb, &tables.manifest, ledger::Step::Cutover, digest)
                            .await?;
                    }
                }
                None
            }
            MigrationPhase::AwaitingApproval => {
                let approved = consent.approval == Approval::Automatic
                    || consent.approved_digest.is_some()
                        && consent.approved_digest == status.verified_digest;
                match &consent.approved_digest {
                    _ if approved => {
                        // What was approved must still be what the source holds: a fresh scan
                        // of it against the digest the operator recorded when it verified.
                        let scans = verify::scan_all(dynamodb, tables, false).await?;
                        let mut changed = verify::changed(&status, &scans);
                        let now = verify::merged(scans);
                        let verified = status.verified_digest.clone().unwrap_or_default();
                        if changed.is_empty() && now.hex() == verified {
                            ledger::record(
                                dynamodb,
                                &tables.manifest,
                                ledger::Step::Cutover,
                                &verified,
                            )
                            .await?;
                            Some(MigrationPhase::CuttingOver)
                        } else {
                            if changed.is_empty() {
                                changed = (0..SEGMENTS).collect();
                            }
                            status = recopy(status, &changed, MigrationPhase::AwaitingApproval);
                            None
                        }
                    }
                    Some(d) => {
                        status.message = Some(format!(
                            "{APPROVE} is {d:?}, but the verified copy's digest is {:?}: set it \
                             to that value to cut over",
                            status.verified_digest.as_deref().unwrap_or_default()
                        ));
                        return Ok(status);
                    }
                    None => return Ok(status),
                }
            }
            // Entered right after a verify (automatic) or an approval checked against the
            // source: the caller rolls the workloads out.
            MigrationPhase::CuttingOver => return Ok(status),
            MigrationPhase::Complete | MigrationPhase::Failed => return Ok(status),
        };
        if let Some(phase) = next {
            status.phase = phase;
        }
        checkpoint.save(&status).await?;
    }
}

/// Whether `status` is of a migration an operator without the ledger (an earlier version) took
/// past its copy: nothing recorded, not even the approval mode every migration records as it
/// starts. Re-verifying a `Complete` one would copy the source again over split tables the
/// workloads have written to since.
fn adoptable(status: &MigrationStatus, recorded: &ledger::Ledger) -> bool {
    recorded.approval.is_none()
        && matches!(
            status.phase,
            MigrationPhase::AwaitingApproval
                | MigrationPhase::CuttingOver
                | MigrationPhase::Complete
        )
        && status.verified_digest.is_some()
}

/// Records what an earlier operator's status says of its migration (see [`adoptable`]); the
/// split tables hold its copy (a migration started by this version records its approval mode
/// before it copies anything, so a status forged on one is never adopted).
async fn adopt(
    dynamodb: &Client,
    tables: &Tables,
    status: &MigrationStatus,
    consent: &Consent,
) -> Result<ledger::Ledger, MigrationError> {
    let digest = status.verified_digest.clone().unwrap_or_default();
    tracing::warn!(
        phase = %status.phase,
        "adopting a migration an earlier operator version ran: recording its phase"
    );
    let approval = ledger::record_approval(dynamodb, &tables.manifest, consent.approval).await?;
    ledger::record(dynamodb, &tables.manifest, ledger::Step::Verified, &digest).await?;
    if status.phase != MigrationPhase::AwaitingApproval {
        ledger::record(dynamodb, &tables.manifest, ledger::Step::Cutover, &digest).await?;
    }
    ledger::read(dynamodb, &tables.manifest).await.map(|mut l| {
        l.approval = l.approval.or(Some(approval));
        l
    })
}

/// `status` as far as the operator's own record (`recorded`) bears it out, and the consent with
/// the approval mode fixed when the migration started.
fn trust(
    mut status: MigrationStatus,
    recorded: &ledger::Ledger,
    consent: &Consent,
) -> (MigrationStatus, Consent) {
    let mut consent = consent.clone();
    let mut notes = Vec::new();
    if let Some(mode) = recorded.approval {
        if mode != consent.approval {
            notes.push(format!(
                "spec.migration.approval is {:?}, but this migration started as {mode:?}: the \
                 mode is fixed once a migration starts",
                consent.approval
            ));
        }
        consent.approval = mode;
    }
    let proven = |digest: &Option<String>| digest.is_some() && *digest == status.verified_digest;
    let untrusted = match status.phase {
        MigrationPhase::AwaitingApproval => !proven(&recorded.verified),
        MigrationPhase::CuttingOver | MigrationPhase::Complete => !proven(&recorded.cutover),
        _ => false,
    };
    if untrusted {
        notes.push(format!(
            "status.migration said {}, which the operator did not record: verifying again",
            status.phase
        ));
        status.phase = MigrationPhase::Verifying;
        status.verified_digest = None;
    }
    if !notes.is_empty() {
        tracing::warn!(notes = ?notes, "migration status not taken as recorded");
        status.message = Some(notes.join("; "));
    }
    (status, consent)
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

pub(crate) fn progress(status: &mut MigrationStatus) {
    status.copied_items = status.segments.iter().map(|s| s.copied).sum();
    let scanned: i64 = status.segments.iter().map(|s| s.scanned).sum();
    let done = status.segments.iter().filter(|s| s.done).count();
    status.message = Some(format!(
        "{} copied of {scanned} read; {done}/{} segments done",
        status.copied_items,
        status.segments.len()
    ));
}

/// Back to `Copying` for `segments` (the legacy table changed under them, as `phase` found),
/// or `Failed` once it changed more than [`MAX_RECOPIES`] times.
fn recopy(mut status: MigrationStatus, segments: &[i32], phase: MigrationPhase) -> MigrationStatus {
    status.recopies += 1;
    status.verified_digest = None;
    status.total_items = None;
    if status.recopies > MAX_RECOPIES {
        return failed(
            status,
            phase,
            format!(
                "the legacy table changed more than {MAX_RECOPIES} times during the migration \
                 (last in segments {segments:?}): stop every lake v1 writer, then start again \
                 (docs/guides/migration.md, \"Starting again\")"
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

pub(crate) fn failed(
    mut status: MigrationStatus,
    phase: MigrationPhase,
    why: String,
) -> MigrationStatus {
    status.phase = MigrationPhase::Failed;
    status.failed_in = Some(phase);
    status.message = Some(why);
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(approval: Approval) -> Consent {
        Consent {
            approval,
            approved_digest: None,
            lake: ("data".into(), "analytics".into()),
        }
    }

    fn at(phase: MigrationPhase, digest: Option<&str>) -> MigrationStatus {
        MigrationStatus {
            phase,
            verified_digest: digest.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn only_migrations_without_any_record_are_adopted() {
        let none = ledger::Ledger::default();
        let started = ledger::Ledger {
            approval: Some(Approval::Manual),
            ..Default::default()
        };
        for phase in [
            MigrationPhase::AwaitingApproval,
            MigrationPhase::CuttingOver,
            MigrationPhase::Complete,
        ] {
            assert!(adoptable(&at(phase, Some("d")), &none), "{phase}");
            // A migration this version started recorded its mode: a status is never adopted.
            assert!(!adoptable(&at(phase, Some("d")), &started), "{phase}");
            assert!(!adoptable(&at(phase, None), &none), "{phase}");
        }
        for phase in [
            MigrationPhase::Pending,
            MigrationPhase::Copying,
            MigrationPhase::Verifying,
        ] {
            assert!(!adoptable(&at(phase, Some("d")), &none), "{phase}");
        }
    }

    #[test]
    fn the_approval_mode_is_the_one_recorded_at_the_start() {
        let recorded = ledger::Ledger {
            approval: Some(Approval::Manual),
            ..Default::default()
        };
        let (status, consent) = trust(
            at(MigrationPhase::Copying, None),
            &recorded,
            &wanted(Approval::Automatic),
        );
        assert_eq!(consent.approval, Approval::Manual);
        assert!(
            status.message.unwrap_or_default().contains("fixed once"),
            "the change is reported"
        );
        // Not yet started: the spec's mode stands.
        let (_, consent) = trust(
            at(MigrationPhase::Pending, None),
            &ledger::Ledger::default(),
            &wanted(Approval::Automatic),
        );
        assert_eq!(consent.approval, Approval::Automatic);
    }

    #[test]
    fn a_phase_the_operator_did_not_record_is_verified_again() {
        let recorded = ledger::Ledger {
            approval: Some(Approval::Manual),
            verified: Some("v1".into()),
            cutover: None,
        };
        let manual = wanted(Approval::Manual);
        for (phase, digest) in [
            (MigrationPhase::CuttingOver, Some("v1")),
            (MigrationPhase::Complete, Some("v1")),
            (MigrationPhase::AwaitingApproval, Some("forged")),
            (MigrationPhase::AwaitingApproval, None),
        ] {
            let (status, _) = trust(at(phase, digest), &recorded, &manual);
            assert_eq!(
                status.phase,
                MigrationPhase::Verifying,
                "{phase} {digest:?}"
            );
            assert_eq!(status.verified_digest, None);
        }
        // What the operator recorded stands.
        let (status, _) = trust(
            at(MigrationPhase::AwaitingApproval, Some("v1")),
            &recorded,
            &manual,
        );
        assert_eq!(status.phase, MigrationPhase::AwaitingApproval);
        let cut = ledger::Ledger {
            cutover: Some("v1".into()),
            ..recorded
        };
        let (status, _) = trust(at(MigrationPhase::Complete, Some("v1")), &cut, &manual);
        assert_eq!(status.phase, MigrationPhase::Complete);
    }
}
