//! The maintenance lease: one row of the manifest table that a maintenance pass holds while it
//! runs, so two passes never run at once — whichever process runs them (the CronJob's, one
//! started by hand, `lake maintain` elsewhere). Every write to the row is conditioned on the
//! revision read before it, so of two processes racing for it exactly one wins. A holder that
//! stops renewing (a killed pod) loses it when it expires; the row is never deleted (the
//! maintenance role holds no `DeleteItem`), only released.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::{Condition, Item, Key, MetaStore, REVISION_ATTR, SortKey, StoreError, Value};

/// The lease row's partition: no table's base URI (those are URLs or absolute paths).
pub const LEASE_PARTITION: &str = "__lake__/maintenance-lease";
const HOLDER_ATTR: &str = "holder";
const EXPIRES_ATTR: &str = "expires_ms";

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "another maintenance pass holds the lease ({holder}) for {seconds} s more; two passes \
         never run at once"
    )]
    Held { holder: String, seconds: i64 },
    #[error(
        "the maintenance lease was taken over (it expired unrenewed, or another process took \
         it): this pass stops"
    )]
    Lost,
    #[error(
        "the maintenance lease row ({LEASE_PARTITION}, version 0, in the manifest table) is \
         malformed: {0}; no pass runs until an administrator deletes it"
    )]
    Malformed(String),
    #[error("the maintenance lease: {0}")]
    Store(#[from] StoreError),
}

/// The lease row as stored: its holder, expiry (ms since the epoch) and revision. Anything else
/// is refused, not guessed: a row whose revision cannot be read could never be taken over.
struct Row {
    holder: String,
    expires: i64,
    revision: i64,
}

impl Row {
    fn read(item: &Item) -> Result<Self, LeaseError> {
        let number = |name: &str| match item.attributes.get(name) {
            Some(Value::N(n)) => Ok(*n),
            other => Err(LeaseError::Malformed(format!(
                "{name} is {other:?}, not a number"
            ))),
        };
        Ok(Self {
            holder: match item.attributes.get(HOLDER_ATTR) {
                Some(Value::S(h)) => h.clone(),
                other => {
                    return Err(LeaseError::Malformed(format!(
                        "{HOLDER_ATTR} is {other:?}, not a string"
                    )));
                }
            },
            expires: number(EXPIRES_ATTR)?,
            revision: number(REVISION_ATTR)?,
        })
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn key() -> Key {
    Key::new(LEASE_PARTITION, SortKey::N(0))
}

/// A held lease.
#[derive(Debug)]
pub struct Lease {
    store: Arc<dyn MetaStore>,
    holder: String,
    revision: i64,
    ttl: Duration,
}

impl Lease {
    /// Takes the lease for `ttl` if no one holds it (or its holder let it expire).
    pub async fn acquire(
        store: Arc<dyn MetaStore>,
        holder: String,
        ttl: Duration,
    ) -> Result<Self, LeaseError> {
        let now = now_ms();
        let (condition, revision) = match store.get(&key()).await? {
            None => (Condition::NotExists, 1),
            Some(item) => {
                let row = Row::read(&item)?;
                if row.expires > now {
                    return Err(LeaseError::Held {
                        holder: row.holder,
                        seconds: (row.expires - now + 999) / 1000,
                    });
                }
                (Condition::Revision(row.revision), row.revision + 1)
            }
        };
        let lease = Self {
            store,
            holder,
            revision,
            ttl,
        };
        match lease.write(condition, now + lease.ttl_ms()).await {
            Ok(()) => Ok(lease),
            // Another process took it between the read and the write.
            Err(StoreError::ConditionFailed { .. }) => Err(match lease.store.get(&key()).await? {
                Some(item) => {
                    let row = Row::read(&item)?;
                    LeaseError::Held {
                        holder: row.holder,
                        seconds: ((row.expires - now_ms()).max(0) + 999) / 1000,
                    }
                }
                None => LeaseError::Lost,
            }),
            Err(e) => Err(e.into()),
        }
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Writes revision `self.revision` (expiring at `expires`) if `condition` holds.
    async fn write(&self, condition: Condition, expires: i64) -> Result<(), StoreError> {
        let item = Item::new(key())
            .with(HOLDER_ATTR, Value::S(self.holder.clone()))
            .with(EXPIRES_ATTR, Value::N(expires))
            .with(REVISION_ATTR, Value::N(self.revision));
        self.store.put(&item, condition).await
    }

    /// Extends the lease by its time to live; `Lost` if someone else holds it now.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        let held = self.revision;
        self.revision += 1;
        match self
            .write(Condition::Revision(held), now_ms() + self.ttl_ms())
            .await
        {
            Ok(()) => Ok(()),
            Err(StoreError::ConditionFailed { .. }) => Err(LeaseError::Lost),
            Err(e) => {
                self.revision = held;
                Err(e.into())
            }
        }
    }

    /// Lets the lease go at once (it expires now), if it is still this holder's. The row is read
    /// first: a renewal cancelled mid-write leaves the revision this holder knows behind the
    /// stored one, and the holder's name (unique per acquisition) says whose it is.
    pub async fn release(mut self) -> Result<(), LeaseError> {
        let held = match self.store.get(&key()).await? {
            Some(item) => match Row::read(&item) {
                Ok(row) if row.holder == self.holder => row.revision,
                _ => return Err(LeaseError::Lost),
            },
            None => return Err(LeaseError::Lost),
        };
        self.revision = held + 1;
        match self.write(Condition::Revision(held), 0).await {
            Ok(()) => Ok(()),
            Err(StoreError::ConditionFailed { .. }) => Err(LeaseError::Lost),
            Err(e) => Err(e.into()),
        }
    }

    /// How often to renew: a third of the time to live, so two renewals may fail before it
    /// expires.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EmbeddedStore;

    async fn store() -> (tempfile::TempDir, Arc<dyn MetaStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("m.redb"), true).unwrap();
        (dir, Arc::new(store))
    }

    #[tokio::test]
    async fn one_holder_at_a_time_until_it_releases_or_expires() {
        let (_dir, store) = store().await;
        let ttl = Duration::from_secs(60);
        let mut a = Lease::acquire(store.clone(), "a".into(), ttl)
            .await
            .unwrap();
        let refused = Lease::acquire(store.clone(), "b".into(), ttl).await;
        assert!(
            matches!(&refused, Err(LeaseError::Held { holder, .. }) if holder == "a"),
            "{refused:?}"
        );
        a.renew().await.unwrap();
        a.release().await.unwrap();
        let b = Lease::acquire(store.clone(), "b".into(), Duration::from_millis(1))
            .await
            .unwrap();
        // b stops renewing: once it expired, c takes it, and b learns it lost it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let c = Lease::acquire(store.clone(), "c".into(), ttl)
            .await
            .unwrap();
        let mut b = b;
        assert!(matches!(b.renew().await, Err(LeaseError::Lost)));
        assert!(matches!(b.release().await, Err(LeaseError::Lost)));
        c.release().await.unwrap();
    }

    /// A row someone else wrote badly is refused by name, never overwritten or taken as free.
    #[tokio::test]
    async fn a_malformed_lease_row_is_refused_naming_it() {
        let (_dir, store) = store().await;
        for bad in [
            Item::new(key()).with(HOLDER_ATTR, Value::S("x".into())),
            Item::new(key())
                .with(HOLDER_ATTR, Value::S("x".into()))
                .with(EXPIRES_ATTR, Value::N(0))
                .with(REVISION_ATTR, Value::S("7".into())),
        ] {
            store.put(&bad, Condition::Always).await.unwrap();
            let refused = Lease::acquire(store.clone(), "a".into(), Duration::from_secs(60)).await;
            let said = refused.as_ref().map(|_| ()).unwrap_err().to_string();
            assert!(
                matches!(refused, Err(LeaseError::Malformed(_))) && said.contains(LEASE_PARTITION),
                "{said}"
            );
            assert_eq!(
                store.get(&key()).await.unwrap(),
                Some(bad),
                "the row was changed"
            );
        }
    }

    /// A store whose reads wait until every racer has read: all of them see the lease free
    /// before any writes, the widest race there is.
    #[derive(Debug)]
    struct ReadTogether {
        inner: Arc<dyn MetaStore>,
        all_read: tokio::sync::Barrier,
        reads: std::sync::atomic::AtomicUsize,
        racers: usize,
    }

    #[async_trait::async_trait]
    impl crate::store::MetaRead for ReadTogether {
        fn describe(&self) -> &str {
            self.inner.describe()
        }
        async fn get(&self, key: &Key) -> Result<Option<Item>, StoreError> {
            let item = self.inner.get(key).await;
            // Each racer's first read waits for the others'; later ones (a loser reading who
            // won) do not.
            let read = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if read < self.racers {
                self.all_read.wait().await;
            }
            item
        }
        async fn query(
            &self,
            partition: &str,
            request: &crate::store::QueryRequest,
        ) -> Result<crate::store::Page, StoreError> {
            self.inner.query(partition, request).await
        }
    }

    #[async_trait::async_trait]
    impl MetaStore for ReadTogether {
        async fn put(&self, item: &Item, condition: Condition) -> Result<(), StoreError> {
            self.inner.put(item, condition).await
        }
        async fn delete(&self, key: &Key, condition: Condition) -> Result<(), StoreError> {
            self.inner.delete(key, condition).await
        }
        async fn batch(&self, ops: &[crate::store::WriteOp]) -> Result<(), StoreError> {
            self.inner.batch(ops).await
        }
    }

    /// Of many processes racing for a free lease, exactly one gets it — even when all of them
    /// read it free before any of them writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_acquirers_get_it_once() {
        let (_dir, inner) = store().await;
        let store: Arc<dyn MetaStore> = Arc::new(ReadTogether {
            inner,
            all_read: tokio::sync::Barrier::new(16),
            reads: std::sync::atomic::AtomicUsize::new(0),
            racers: 16,
        });
        // Spawned all at once (a lazy iterator would start each after the previous ended).
        let attempts: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    Lease::acquire(store, format!("p{i}"), Duration::from_secs(60)).await
                })
            })
            .collect();
        let mut won = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(_) => won += 1,
                Err(LeaseError::Held { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(won, 1);
    }
}
