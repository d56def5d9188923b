//! Keeping this replica's tasks its own: one tick renews the lease of
//! every task it runs, all at once, and each run fences itself (see the
//! module's "Fencing") when renewals stop succeeding.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{FENCE, Inner, Running, StoreDown, Tasks};

impl Tasks {
    /// Start the task that renews the leases of the tasks this replica
    /// runs, once.
    pub(super) fn start_renewing(&self) {
        self.inner.renewing.get_or_init(|| {
            let every = self.inner.policy.lease / 3;
            crate::sandbox::spread::spawn(renew_every(Arc::downgrade(&self.inner), every));
        });
    }

    /// Renew the lease of run `run` of the task `id`, which this replica
    /// runs: `running` learns when, for its fence. A task another replica
    /// cancelled or took over, or that is gone, is stopped here. A store
    /// that cannot be reached changes nothing: it may be back before the
    /// fence, and if it is not, the fence stops the call.
    pub(crate) async fn renew(&self, id: &str, run: u32, running: &Running) {
        let began = Instant::now();
        let lease = self.lease_from_now();
        let replica = self.replica().to_owned();
        let renewed = self
            .update(id, |r| {
                let ours = !r.state.is_finished() && r.replica == replica && r.runs == run;
                r.lease_until_ms = lease;
                ours
            })
            .await;
        match renewed {
            Ok(Some(_)) => running.renewed_at(began),
            Ok(None) => self.stop_run(id, run),
            Err(StoreDown) => {}
        }
    }

    /// Renew every task this replica runs, at once.
    async fn renew_all(&self) {
        let runs: Vec<((String, u32), Arc<Running>)> = self
            .running()
            .iter()
            .map(|(key, running)| (key.clone(), running.clone()))
            .collect();
        let renewals = runs
            .iter()
            .map(|((id, run), running)| self.renew(id, *run, running));
        futures::future::join_all(renewals).await;
    }

    /// How long after its last successful renewal a run stops itself.
    pub(super) fn fence_after(&self) -> Duration {
        self.inner.policy.lease * FENCE.0 / FENCE.1
    }
}

/// Every `every`, renew the leases of the tasks this replica runs. Ends
/// with the tasks.
async fn renew_every(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        Tasks { inner }.renew_all().await;
    }
}

/// Returns once `running`'s last successful renewal is `after` old: the
/// moment its call must stop, before any replica may find its lease run
/// out.
pub(super) async fn fenced(running: &Running, after: Duration) {
    loop {
        let deadline = running.last_renewed() + after;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}
