//! Leader election on a `coordination.k8s.io` Lease: of the operator's replicas, only the holder
//! of the Lease reconciles. A replica waits (serving /healthz) until it acquires the Lease, renews
//! it every third of its duration, and stops — the process exits, and Kubernetes restarts it as a
//! standby — the moment a renewal fails, so two replicas never reconcile at once for longer than
//! one renewal interval.

use std::time::Duration;

use kube::Client;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};

/// Which Lease, and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    pub lease: String,
    /// This replica's identity in the Lease (its pod name).
    pub identity: String,
    /// How long a holder that stops renewing keeps the Lease.
    pub ttl: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election on Lease {namespace}/{lease}: {source}")]
    Lease {
        namespace: String,
        lease: String,
        #[source]
        source: kube_leader_election::Error,
    },
    #[error("lost the Lease {namespace}/{lease} to {holder:?}; stopping so another replica leads")]
    Lost {
        namespace: String,
        lease: String,
        holder: Option<String>,
    },
}

/// A held Lease.
pub struct Leadership {
    lock: LeaseLock,
    election: LeaderElection,
}

impl LeaderElection {
    fn lock(&self, client: Client) -> LeaseLock {
        LeaseLock::new(
            client,
            &self.namespace,
            LeaseLockParams {
                lease_name: self.lease.clone(),
                holder_id: self.identity.clone(),
                lease_ttl: self.ttl,
            },
        )
    }

    fn error(&self) -> impl FnOnce(kube_leader_election::Error) -> LeaderError + '_ {
        |source| LeaderError::Lease {
            namespace: self.namespace.clone(),
            lease: self.lease.clone(),
            source,
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(self, client: Client) -> Result<Leadership, LeaderError> {
        let lock = self.lock(client);
        let mut waiting = false;
        loop {
            match lock.try_acquire_or_renew().await.map_err(self.error())? {
                LeaseLockResult::Acquired(_) => {
                    tracing::info!(lease = %self.lease, identity = %self.identity, "leading");
                    return Ok(Leadership {
                        lock,
                        election: self,
                    });
                }
                LeaseLockResult::NotAcquired(lease) => {
                    if !waiting {
                        let holder = lease.spec.and_then(|s| s.holder_identity);
                        tracing::info!(lease = %self.lease, ?holder, "standing by: another replica leads");
                        waiting = true;
                    }
                    tokio::time::sleep(self.ttl / 3).await;
                }
            }
        }
    }
}

impl Leadership {
    /// Renews the Lease every third of its duration; returns (an error) only when it is lost.
    pub async fn keep(&self) -> LeaderError {
        let election = &self.election;
        loop {
            tokio::time::sleep(election.ttl / 3).await;
            match self.lock.try_acquire_or_renew().await {
                Ok(LeaseLockResult::Acquired(_)) => {}
                Ok(LeaseLockResult::NotAcquired(lease)) => {
                    return LeaderError::Lost {
                        namespace: election.namespace.clone(),
                        lease: election.lease.clone(),
                        holder: lease.spec.and_then(|s| s.holder_identity),
                    };
                }
                Err(source) => return election.error()(source),
            }
        }
    }

    /// Hands the Lease back (a clean shutdown), so a standby leads at once.
    pub async fn step_down(self) {
        if let Err(e) = self.lock.step_down().await {
            tracing::warn!(error = %e, "could not hand the Lease back; it expires on its own");
        }
    }
}
