//! Leases: rows of the manifest table that a holder keeps while it works, so that two processes
//! never do conflicting work at once, whichever processes they are (the CronJob's pass, one
//! started by hand, `lake maintain` elsewhere, a metadata process dropping a table). Every write
//! to a row is conditioned on the revision read before it, so of two processes racing for it
//! exactly one wins. A holder that stops renewing (a killed pod) loses it when it expires; a row
//! is never deleted (the maintenance role holds no `DeleteItem`), only released.
//!
//! Two kinds ([`LeaseOf`]): the *maintenance lease* (one per warehouse: two passes never run at
//! once) and a *table lease* (one per table: a pass working on a table and a `DROP TABLE` of it
//! take turns, so a pass never removes files or rows of a table created again under its name).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::{Condition, Item, Key, MetaStore, REVISION_ATTR, SortKey, StoreError, Value};

/// The maintenance lease's partition: no table's base URI (those are URLs or paths; Lance never
/// writes one starting with `__lake__`).
pub const LEASE_PARTITION: &str = "__lake__/maintenance-lease";
/// A table lease's partition: this, then the table's base URI.
pub const TABLE_LEASE_PREFIX: &str = "__lake__/table-lease/";
/// How long a lease holds without renewal: a holder killed mid-way (its pod evicted) blocks
/// the next one at most this long.
pub const LEASE_TTL: Duration = Duration::from_secs(300);
const HOLDER_ATTR: &str = "holder";
const EXPIRES_ATTR: &str = "expires_ms";

/// What a lease guards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOf {
    /// Maintenance of the whole warehouse: one pass at a time.
    Pass,
    /// One table (its base URI, and its name for messages).
    Table { base_uri: String, table: String },
}

impl LeaseOf {
    fn key(&self) -> Key {
        match self {
            LeaseOf::Pass => Key::new(LEASE_PARTITION, SortKey::N(0)),
            LeaseOf::Table { base_uri, .. } => {
                Key::new(format!("{TABLE_LEASE_PREFIX}{base_uri}"), SortKey::N(0))
            }
        }
    }

    /// Why it is held, said when it is.
    fn promise(&self) -> &'static str {
        match self {
            LeaseOf::Pass => "two passes never run at once",
            LeaseOf::Table { .. } => {
                "a maintenance pass on a table and a DROP TABLE of it take turns"
            }
        }
    }
}

impl std::fmt::Display for LeaseOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseOf::Pass => f.write_str("the maintenance lease"),
            LeaseOf::Table { table, .. } => write!(f, "the lease of table {table}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("{} holds {lease} for {seconds} s more; {}", holder_of(lease, holder), lease.promise())]
    Held {
        lease: LeaseOf,
        holder: String,
        seconds: i64,
    },
    #[error(
        "{lease} was taken over (it expired unrenewed, or another process took it): its work \
         stops"
    )]
    Lost { lease: LeaseOf },
    #[error(
        "{lease}'s row ({key}, in the manifest table) is malformed: {detail}; nothing that needs \
         it runs until an administrator deletes the row",
        key = lease.key()
    )]
    Malformed { lease: LeaseOf, detail: String },
    #[error("{lease}: {source}")]
    Store {
        lease: LeaseOf,
        #[source]
        source: Box<StoreError>,
    },
}

/// Who holds a lease, as the refusal names them.
fn holder_of(lease: &LeaseOf, holder: &str) -> String {
    match lease {
        LeaseOf::Pass => format!("another maintenance pass ({holder})"),
        LeaseOf::Table { .. } => holder.to_owned(),
    }
}

/// A lease row as stored: its holder, expiry (ms since the epoch) and revision. Anything else
/// is refused, not guessed: a row whose revision cannot be read could never be taken over.
struct Row {
    holder: String,
    expires: i64,
    revision: i64,
}

impl Row {
    fn read(lease: &LeaseOf, item: &Item) -> Result<Self, LeaseError> {
        let malformed = |detail: String| LeaseError::Malformed {
            lease: lease.clone(),
            detail,
        };
        let number = |name: &str| match item.attributes.get(name) {
            Some(Value::N(n)) => Ok(*n),
            other => Err(malformed(format!("{name} is {other:?}, not a number"))),
        };
        Ok(Self {
            holder: match item.attributes.get(HOLDER_ATTR) {
                Some(Value::S(h)) => h.clone(),
                other => {
                    return Err(malformed(format!(
                        "{HOLDER_ATTR} is {other:?}, not a string"
                    )));
                }
            },
            expires: number(EXPIRES_ATTR)?,
            revision: number(REVISION_ATTR)?,
        })
    }
}

/// Who holds a lease: the pod (its host name), the process and when it took it (so two takings
/// by one process have different holders).
pub fn holder() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "a host".into());
    format!("{host}, pid {}, at {}", std::process::id(), now_ms())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A held lease.
#[derive(Debug)]
pub struct Lease {
    store: Arc<dyn MetaStore>,
    of: LeaseOf,
    holder: String,
    revision: i64,
    ttl: Duration,
    /// When it expires as far as this holder knows (ms since the epoch): its last write's.
    expires: i64,
}

impl Lease {
    /// Takes the lease `of` for `ttl` if no one holds it (or its holder let it expire).
    pub async fn acquire(
        store: Arc<dyn MetaStore>,
        of: LeaseOf,
        holder: String,
        ttl: Duration,
    ) -> Result<Self, LeaseError> {
        let now = now_ms();
        let read = store.get(&of.key()).await;
        let (condition, revision) = match read.map_err(|source| LeaseError::Store {
            lease: of.clone(),
            source: Box::new(source),
        })? {
            None => (Condition::NotExists, 1),
            Some(item) => {
                let row = Row::read(&of, &item)?;
                if row.expires > now {
                    return Err(LeaseError::Held {
                        lease: of,
                        holder: row.holder,
                        seconds: (row.expires - now + 999) / 1000,
                    });
                }
                (Condition::Revision(row.revision), row.revision + 1)
            }
        };
        let mut lease = Self {
            store,
            of,
            holder,
            revision,
            ttl,
            expires: 0,
        };
        let expires = now + lease.ttl_ms();
        match lease.write(condition, expires).await {
            Ok(()) => {}
            // Another process took it between the read and the write — or this write landed
            // and its answer was lost, and the store's retry found its own row.
            Err(StoreError::ConditionFailed { .. }) => match lease.stored().await? {
                Some(row) if lease.is_mine(&row) => {}
                Some(row) => {
                    return Err(LeaseError::Held {
                        lease: lease.of,
                        holder: row.holder,
                        seconds: ((row.expires - now_ms()).max(0) + 999) / 1000,
                    });
                }
                None => return Err(lease.lost()),
            },
            Err(e) => return Err(lease.failed(e)),
        }
        lease.expires = expires;
        Ok(lease)
    }

    /// [`Lease::acquire`], trying again while someone else holds it, for at most `wait`.
    pub async fn acquire_waiting(
        store: Arc<dyn MetaStore>,
        of: LeaseOf,
        holder: String,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Self, LeaseError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match Self::acquire(store.clone(), of.clone(), holder.clone(), ttl).await {
                // Lost: the row went between the write and the read after it; it is free now.
                Err(LeaseError::Held { .. } | LeaseError::Lost { .. })
                    if tokio::time::Instant::now() < deadline =>
                {
                    let next = (tokio::time::Instant::now() + RETRY_EVERY).min(deadline);
                    tokio::time::sleep_until(next).await;
                }
                other => return other,
            }
        }
    }

    /// The row as stored now.
    async fn stored(&self) -> Result<Option<Row>, LeaseError> {
        let item = self.store.get(&self.of.key()).await;
        match item.map_err(|e| self.failed(e))? {
            Some(item) => Ok(Some(Row::read(&self.of, &item)?)),
            None => Ok(None),
        }
    }

    /// Whether `row` is this holder's last write (the holder's name is unique per acquisition).
    fn is_mine(&self, row: &Row) -> bool {
        row.holder == self.holder && row.revision == self.revision
    }

    fn failed(&self, source: StoreError) -> LeaseError {
        LeaseError::Store {
            lease: self.of.clone(),
            source: Box::new(source),
        }
    }

    fn lost(&self) -> LeaseError {
        LeaseError::Lost {
            lease: self.of.clone(),
        }
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Writes revision `self.revision` (expiring at `expires`) if `condition` holds.
    async fn write(&self, condition: Condition, expires: i64) -> Result<(), StoreError> {
        let item = Item::new(self.of.key())
            .with(HOLDER_ATTR, Value::S(self.holder.clone()))
            .with(EXPIRES_ATTR, Value::N(expires))
            .with(REVISION_ATTR, Value::N(self.revision));
        self.store.put(&item, condition).await
    }

    /// Extends the lease by its time to live; `Lost` if someone else holds it now.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        let held = self.revision;
        self.revision += 1;
        let expires = now_ms() + self.ttl_ms();
        match self.write(Condition::Revision(held), expires).await {
            Ok(()) => {}
            // Someone else's write — or this one, landed with its answer lost and retried.
            Err(StoreError::ConditionFailed { .. }) => match self.stored().await {
                Ok(Some(row)) if self.is_mine(&row) => {}
                Ok(_) => return Err(self.lost()),
                Err(e) => {
                    self.revision = held;
                    return Err(e);
                }
            },
            Err(e) => {
                self.revision = held;
                return Err(self.failed(e));
            }
        }
        self.expires = expires;
        Ok(())
    }

    /// Lets the lease go at once (it expires now), if it is still this holder's. The row is read
    /// first: a renewal cancelled mid-write leaves the revision this holder knows behind the
    /// stored one, and the holder's name (unique per acquisition) says whose it is.
    pub async fn release(mut self) -> Result<(), LeaseError> {
        let held = match self.stored().await? {
            Some(row) if row.holder == self.holder => row.revision,
            _ => return Err(self.lost()),
        };
        self.revision = held + 1;
        match self.write(Condition::Revision(held), 0).await {
            Ok(()) => Ok(()),
            Err(StoreError::ConditionFailed { .. }) => match self.stored().await? {
                Some(row) if self.is_mine(&row) => Ok(()),
                _ => Err(self.lost()),
            },
            Err(e) => Err(self.failed(e)),
        }
    }

    /// How often to renew: a third of the time to live, so two renewals may fail before it
    /// expires.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// Keeps the lease renewed in the background until [`Renewed::release`] (or until the
    /// `Renewed` is dropped: then it expires unrenewed).
    pub fn keep_renewed(self) -> Renewed {
        let every = self.renew_every();
        let of = self.of.clone();
        let margin = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
        let held_until = Arc::new(AtomicI64::new(self.expires));
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let renewing = {
            let held_until = held_until.clone();
            let mut lease = self;
            tokio::spawn(async move {
                loop {
                    // Only the wait is raced against the stop: a renewal in flight ends (and
                    // is known) before the holder releases.
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = &mut stopped => return Some(lease),
                    }
                    match lease.renew().await {
                        Ok(()) => held_until.store(lease.expires, Ordering::SeqCst),
                        Err(e @ LeaseError::Lost { .. }) => {
                            tracing::warn!(error = %e, "a lease was lost");
                            let _ = lost_tx.send(true);
                            return None;
                        }
                        // A store error: tried again at the next renewal, within its time.
                        Err(e) => tracing::warn!(error = %e, "a lease was not renewed"),
                    }
                }
            })
        };
        Renewed {
            of,
            held_until,
            margin,
            lost,
            stop,
            renewing: Renewal(renewing),
        }
    }
}

/// How often [`Lease::acquire_waiting`] looks again.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// The renewal task, stopped when its [`Renewed`] is dropped (a holder that panicked must not
/// keep its lease alive).
#[derive(Debug)]
struct Renewal(tokio::task::JoinHandle<Option<Lease>>);

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A lease renewed in the background while its holder works.
#[derive(Debug)]
#[must_use = "a lease renewed until it is released"]
pub struct Renewed {
    of: LeaseOf,
    /// When the last successful write lets it expire.
    held_until: Arc<AtomicI64>,
    /// How long before `held_until` the holder stops trusting it.
    margin: i64,
    lost: tokio::sync::watch::Receiver<bool>,
    stop: tokio::sync::oneshot::Sender<()>,
    renewing: Renewal,
}

impl Renewed {
    /// Whether the holder must stop: someone else took the lease, or renewals have failed so
    /// long that it may expire before the holder's next step ends.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
            || now_ms()
                > self
                    .held_until
                    .load(Ordering::SeqCst)
                    .saturating_sub(self.margin)
    }

    /// The error to stop with once it [is lost](Renewed::is_lost).
    pub fn lost(&self) -> LeaseError {
        LeaseError::Lost {
            lease: self.of.clone(),
        }
    }

    /// `Err` once it [is lost](Renewed::is_lost): checked before each step of the work it guards.
    pub fn check(&self) -> Result<(), LeaseError> {
        if self.is_lost() {
            Err(self.lost())
        } else {
            Ok(())
        }
    }

    /// Stops renewing (after a renewal in flight) and lets the lease go; a failure to is logged:
    /// it expires unrenewed.
    pub async fn release(self) {
        let Renewed {
            stop, mut renewing, ..
        } = self;
        let _ = stop.send(());
        if let Ok(Some(lease)) = (&mut renewing.0).await
            && let Err(e) = lease.release().await
        {
            tracing::warn!(error = %e, "a lease was not released; it expires unrenewed");
        }
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
        let mut a = Lease::acquire(store.clone(), LeaseOf::Pass, "a".into(), ttl)
            .await
            .unwrap();
        let refused = Lease::acquire(store.clone(), LeaseOf::Pass, "b".into(), ttl).await;
        assert!(
            matches!(&refused, Err(LeaseError::Held { holder, .. }) if holder == "a"),
            "{refused:?}"
        );
        a.renew().await.unwrap();
        a.release().await.unwrap();
        let b = Lease::acquire(
            store.clone(),
            LeaseOf::Pass,
            "b".into(),
            Duration::from_millis(1),
        )
        .await
        .unwrap();
        // b stops renewing: once it expired, c takes it, and b learns it lost it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let c = Lease::acquire(store.clone(), LeaseOf::Pass, "c".into(), ttl)
            .await
            .unwrap();
        let mut b = b;
        assert!(matches!(b.renew().await, Err(LeaseError::Lost { .. })));
        assert!(matches!(b.release().await, Err(LeaseError::Lost { .. })));
        c.release().await.unwrap();
    }

    fn table(name: &str) -> LeaseOf {
        LeaseOf::Table {
            base_uri: format!("s3://b/wh/{name}.lance"),
            table: name.into(),
        }
    }

    /// Each table has its own lease, apart from the pass's: a pass holding the maintenance lease
    /// takes table leases one by one, and a DROP of one table waits for that table only.
    #[tokio::test]
    async fn table_leases_are_one_per_table_and_apart_from_the_pass() {
        let (_dir, store) = store().await;
        let ttl = Duration::from_secs(60);
        let pass = Lease::acquire(store.clone(), LeaseOf::Pass, "pass".into(), ttl)
            .await
            .unwrap();
        let a = Lease::acquire(store.clone(), table("a"), "pass".into(), ttl)
            .await
            .unwrap();
        let b = Lease::acquire(store.clone(), table("b"), "DROP TABLE b".into(), ttl)
            .await
            .unwrap();
        let refused = Lease::acquire(store.clone(), table("a"), "DROP TABLE a".into(), ttl)
            .await
            .unwrap_err();
        let said = refused.to_string();
        assert!(
            said.starts_with("pass holds the lease of table a for ")
                && said.ends_with(
                    " s more; a maintenance pass on a table and a DROP TABLE of it take turns"
                ),
            "{said}"
        );
        for lease in [a, b, pass] {
            lease.release().await.unwrap();
        }
    }

    /// A DROP waits while a pass works on its table and goes ahead once it is let go; one that
    /// waited its time out is refused naming the holder.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_acquirer_gets_it_when_let_go_or_gives_up_naming_the_holder() {
        let (_dir, store) = store().await;
        let ttl = Duration::from_secs(60);
        let held = Lease::acquire(store.clone(), table("t"), "a pass".into(), ttl)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let refused = Lease::acquire_waiting(
            store.clone(),
            table("t"),
            "DROP TABLE t".into(),
            ttl,
            Duration::from_millis(1200),
        )
        .await;
        let waited = started.elapsed();
        assert!(
            matches!(&refused, Err(LeaseError::Held { holder, .. }) if holder == "a pass"),
            "{refused:?}"
        );
        assert!(waited >= Duration::from_millis(1200), "{waited:?}");
        let waiting = tokio::spawn(Lease::acquire_waiting(
            store.clone(),
            table("t"),
            "DROP TABLE t".into(),
            ttl,
            Duration::from_secs(30),
        ));
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!waiting.is_finished(), "it did not wait for the holder");
        held.release().await.unwrap();
        let dropping = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("it went on waiting after the lease was let go")
            .unwrap()
            .unwrap();
        dropping.release().await.unwrap();
    }

    /// A row someone else wrote badly is refused by name, never overwritten or taken as free.
    #[tokio::test]
    async fn a_malformed_lease_row_is_refused_naming_it() {
        let (_dir, store) = store().await;
        for bad in [
            Item::new(LeaseOf::Pass.key()).with(HOLDER_ATTR, Value::S("x".into())),
            Item::new(LeaseOf::Pass.key())
                .with(HOLDER_ATTR, Value::S("x".into()))
                .with(EXPIRES_ATTR, Value::N(0))
                .with(REVISION_ATTR, Value::S("7".into())),
        ] {
            store.put(&bad, Condition::Always).await.unwrap();
            let refused = Lease::acquire(
                store.clone(),
                LeaseOf::Pass,
                "a".into(),
                Duration::from_secs(60),
            )
            .await;
            let said = refused.as_ref().map(|_| ()).unwrap_err().to_string();
            assert!(
                matches!(refused, Err(LeaseError::Malformed { .. }))
                    && said.contains(LEASE_PARTITION),
                "{said}"
            );
            assert_eq!(
                store.get(&LeaseOf::Pass.key()).await.unwrap(),
                Some(bad),
                "the row was changed"
            );
        }
    }

    /// A store rigged for races and faults: its first `racers` reads wait until all of them
    /// have read (every racer sees the lease free before any writes, the widest race there
    /// is); its writes can land with their answer lost (the SDK's retry then meets its own
    /// write as a failed condition), or fail without landing.
    #[derive(Debug)]
    struct Rigged {
        inner: Arc<dyn MetaStore>,
        all_read: tokio::sync::Barrier,
        reads: std::sync::atomic::AtomicUsize,
        racers: usize,
        fault: std::sync::Mutex<Fault>,
    }

    #[derive(Debug, Clone, Copy)]
    enum Fault {
        None,
        AnswerLost,
        Down,
    }

    impl Rigged {
        async fn new(racers: usize) -> (tempfile::TempDir, Arc<Self>) {
            let (dir, inner) = store().await;
            let store = Arc::new(Self {
                inner,
                all_read: tokio::sync::Barrier::new(racers.max(1)),
                reads: std::sync::atomic::AtomicUsize::new(0),
                racers,
                fault: std::sync::Mutex::new(Fault::None),
            });
            (dir, store)
        }

        fn set(&self, fault: Fault) {
            *self.fault.lock().unwrap() = fault;
        }
    }

    #[async_trait::async_trait]
    impl crate::store::MetaRead for Rigged {
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
    impl MetaStore for Rigged {
        async fn put(&self, item: &Item, condition: Condition) -> Result<(), StoreError> {
            let fault = *self.fault.lock().unwrap();
            match fault {
                Fault::None => self.inner.put(item, condition).await,
                Fault::AnswerLost => {
                    self.inner.put(item, condition).await?;
                    Err(StoreError::ConditionFailed {
                        store: "rigged".into(),
                        key: item.key.clone(),
                    })
                }
                Fault::Down => Err(StoreError::Backend {
                    store: "rigged".into(),
                    source: "unreachable".into(),
                }),
            }
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
        let (_dir, store) = Rigged::new(16).await;
        // Spawned all at once (a lazy iterator would start each after the previous ended).
        let attempts: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    Lease::acquire(
                        store,
                        LeaseOf::Pass,
                        format!("p{i}"),
                        Duration::from_secs(60),
                    )
                    .await
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

    /// A write that landed but whose answer was lost is this holder's, not someone else's: it
    /// takes, renews and releases the lease all the same.
    #[tokio::test]
    async fn a_write_whose_answer_was_lost_is_known_for_its_own() {
        let (_dir, store) = Rigged::new(0).await;
        store.set(Fault::AnswerLost);
        let ttl = Duration::from_secs(60);
        let mut lease = Lease::acquire(store.clone(), LeaseOf::Pass, "a".into(), ttl)
            .await
            .unwrap();
        lease.renew().await.unwrap();
        lease.release().await.unwrap();
        store.set(Fault::None);
        Lease::acquire(store.clone(), LeaseOf::Pass, "b".into(), ttl)
            .await
            .unwrap();
    }

    /// A holder whose renewals keep failing stops trusting its lease before it expires; one
    /// that is dropped (its holder panicked) stops renewing, so the lease expires.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewed_lease_is_given_up_in_time_and_dies_with_its_holder() {
        let (_dir, store) = Rigged::new(0).await;
        let ttl = Duration::from_millis(900);
        let renewed = Lease::acquire(store.clone(), LeaseOf::Pass, "a".into(), ttl)
            .await
            .unwrap()
            .keep_renewed();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(!renewed.is_lost(), "renewals that land keep it");
        store.set(Fault::Down);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(renewed.is_lost(), "held on though it may have expired");
        store.set(Fault::None);
        renewed.release().await;

        let renewed = Lease::acquire(store.clone(), LeaseOf::Pass, "b".into(), ttl)
            .await
            .unwrap()
            .keep_renewed();
        drop(renewed);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        Lease::acquire(store.clone(), LeaseOf::Pass, "c".into(), ttl)
            .await
            .expect("the dropped holder's lease was still renewed");
    }
}
