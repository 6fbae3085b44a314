//! Leader election on a `coordination.k8s.io` Lease: of the operator's replicas, only the holder
//! of the Lease reconciles. A replica waits (serving /healthz) until it acquires the Lease, renews
//! it every third of its duration, and stops — the process exits, and Kubernetes restarts it as a
//! standby — the moment a renewal fails, so two replicas never reconcile at once for longer than
//! one renewal interval.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};

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
        source: LeaseManagerError,
    },
    #[error("lost the Lease {namespace}/{lease}; stopping so another replica leads")]
    Lost { namespace: String, lease: String },
}

/// A held Lease.
pub struct Leadership {
    manager: LeaseManager,
    election: LeaderElection,
}

impl LeaderElection {
    /// The Lease's duration and renewal margin in whole seconds: the holder renews a third of
    /// the duration before it ends (at least 1 s), so one missed renewal does not lose it.
    fn params(&self) -> LeaseParams {
        let duration = self.ttl.as_secs().max(2);
        let grace = (duration / 3).clamp(1, duration - 1);
        LeaseParams::new(self.identity.clone(), duration, grace)
    }

    fn error(&self) -> impl FnOnce(LeaseManagerError) -> LeaderError + '_ {
        |source| LeaderError::Lease {
            namespace: self.namespace.clone(),
            lease: self.lease.clone(),
            source,
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(self, client: Client) -> Result<Leadership, LeaderError> {
        let manager = LeaseManager::new(
            client,
            self.lease.clone(),
            self.namespace.clone(),
            self.params(),
            LeaseCreateMode::AutoCreate,
        )
        .await
        .map_err(self.error())?;
        tracing::info!(lease = %self.lease, identity = %self.identity, "standing by until this replica holds the Lease");
        // `changed` returns when this replica's state changes: from standby, only to leading.
        while !manager.changed().await.map_err(self.error())? {}
        tracing::info!(lease = %self.lease, identity = %self.identity, "leading");
        Ok(Leadership {
            manager,
            election: self,
        })
    }
}

impl Leadership {
    /// Renews the Lease before it expires; returns (an error) only when it is lost.
    pub async fn keep(&self) -> LeaderError {
        let election = &self.election;
        loop {
            match self.manager.changed().await {
                Ok(true) => {}
                Ok(false) => {
                    return LeaderError::Lost {
                        namespace: election.namespace.clone(),
                        lease: election.lease.clone(),
                    };
                }
                Err(source) => return election.error()(source),
            }
        }
    }

    /// Hands the Lease back (a clean shutdown), so a standby leads at once.
    pub async fn step_down(self) {
        if let Err(e) = self.manager.release().await {
            tracing::warn!(error = %e, "could not hand the Lease back; it expires on its own");
        }
    }
}
