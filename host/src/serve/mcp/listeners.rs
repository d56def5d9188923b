//! Who hears that the tool list changed (a reload, `--watch`), and the task
//! that tells them.

use std::sync::{Arc, Mutex};

use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use super::NOTIFY_TIMEOUT;
use crate::serve::Shared;

/// Who hears of a new tool list: 2025-11-25 clients by their connection
/// (stdio, or an HTTP session), 2026-07-28 clients by their open
/// `subscriptions/listen` request.
#[derive(Debug, Default)]
pub(super) struct Listeners {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Open `subscriptions/listen` requests, by a number of their own;
    /// each removes itself when it ends.
    subscriptions: Mutex<std::collections::HashMap<u64, SubscriptionSink>>,
    next_subscription: std::sync::atomic::AtomicU64,
}

impl Listeners {
    /// Tell `peer`, a client of a 2025-11-25 connection, of every change.
    pub(super) fn add_peer(&self, peer: Peer<RoleServer>) {
        let mut peers = self.peers.lock().expect("listeners lock");
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// Tell `sink`, an open `subscriptions/listen` request, of every
    /// change until [`Listeners::remove_subscription`]; its number.
    pub(super) fn add_subscription(&self, sink: SubscriptionSink) -> u64 {
        let id = self
            .next_subscription
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.subscriptions
            .lock()
            .expect("listeners lock")
            .insert(id, sink);
        id
    }

    /// Forget the subscription numbered `id`: its request ended.
    pub(super) fn remove_subscription(&self, id: u64) {
        self.subscriptions
            .lock()
            .expect("listeners lock")
            .remove(&id);
    }

    /// Tell every listener the tool list changed, forgetting those gone.
    /// Each is told on its own task, under [`NOTIFY_TIMEOUT`]: a client
    /// that does not read its stream holds up nobody else.
    fn tools_changed(&self) {
        let peers: Vec<_> = {
            let mut peers = self.peers.lock().expect("listeners lock");
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed()).await;
            });
        }
        let sinks: Vec<_> = self
            .subscriptions
            .lock()
            .expect("listeners lock")
            .values()
            .cloned()
            .collect();
        for sink in sinks {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, sink.notify_tool_list_changed()).await;
            });
        }
    }

    /// Until the server stops: pass every reload of `shared` on.
    pub(super) fn spawn_notifier(self: &Arc<Self>, shared: &Shared) -> tokio::task::JoinHandle<()> {
        let mut changes = shared.changes();
        let listeners = self.clone();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                listeners.tools_changed();
            }
        })
    }
}
