//! Places held on this replica, and in a principal's share on every
//! replica, for sessions being opened or brought back here: taken when
//! the request is admitted, so that concurrent ones cannot pass the cap
//! or the share, and given back (or claimed) when it is answered.

use std::collections::HashMap;
use std::sync::Arc;

use super::{MAX_SESSIONS, Sessions, shared};

/// Why a session cannot be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::serve) enum Full {
    /// The principal holds its share (`per_principal`), on this replica
    /// or, when sessions are shared, on all of them.
    Share,
    /// This replica holds [`MAX_SESSIONS`].
    Server,
}

/// A place held for a session being opened, from its `initialize`'s
/// admission to its answer: claimed by the session the answer names, or
/// given back when it is dropped unclaimed.
#[derive(Debug)]
pub(in crate::serve) struct Reservation {
    sessions: Arc<Sessions>,
    /// Whose: a principal's id, or [`RESTORING`].
    principal: String,
    /// Whether the session counts against its principal's share (callers
    /// are told apart).
    counted: bool,
    /// The place in the principal's share on every replica, when sessions
    /// are shared and the store could be reached.
    place: Option<shared::Place>,
}

/// Whose places sessions being restored hold: room on this replica, in
/// no principal's share (a restored session is already counted in its
/// owner's, on every replica).
pub(super) const RESTORING: &str = "";

impl Reservation {
    /// Record that the principal holding this place opened session `id`,
    /// here and, when sessions are shared, for every replica. The client
    /// learns the id only once this returns, so no replica sees it
    /// unclaimed.
    pub(in crate::serve) async fn claim(mut self, id: &str) {
        let claimed = self
            .sessions
            .claim(id, &self.principal, self.place.as_ref(), self.counted)
            .await;
        if claimed {
            // The place is the session's now: not to be given back.
            self.place = None;
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.sessions.opened(&self.principal);
        let (Some(place), Some(shared)) = (self.place.take(), self.sessions.shared.clone()) else {
            return;
        };
        // Unclaimed: the opening failed. The place would lapse by itself
        // (`PLACE_HELD`); giving it back frees it now.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = shared.release(&place).await {
                    tracing::debug!(error = %e, "cannot give back an unused MCP session place");
                }
            });
        }
    }
}

impl Sessions {
    /// Hold a place for a session `principal` opens: within
    /// [`MAX_SESSIONS`] here, counting those being opened, and, when
    /// `share` (callers are told apart), within its share, here and, when
    /// sessions are shared, on every replica.
    pub(in crate::serve) async fn reserve(
        self: &Arc<Self>,
        principal: &str,
        share: bool,
    ) -> Result<Reservation, Full> {
        // Shared sessions are counted in Redis, on every replica: this
        // replica's own count decides only when Redis cannot be reached.
        let counted_here = share && self.shared.is_none();
        let mut reservation = self.hold(principal, counted_here)?;
        reservation.counted = share;
        let (true, Some(shared)) = (share, &self.shared) else {
            return Ok(reservation);
        };
        match shared.reserve(principal, self.per_principal).await {
            Ok(Some(place)) => {
                reservation.place = Some(place);
                Ok(reservation)
            }
            Ok(None) => Err(Full::Share),
            Err(e) => {
                // The session will work here only; this replica's own
                // count bounds the principal meanwhile.
                tracing::warn!(error = %e, "cannot count a principal's MCP sessions across replicas");
                if self.beyond_share(principal) {
                    return Err(Full::Share);
                }
                Ok(reservation)
            }
        }
    }

    /// A place here for a session `principal` opens (or, for
    /// [`RESTORING`], one restored here): within [`MAX_SESSIONS`], counting
    /// those being opened, and, when `share`, within the principal's share
    /// as this replica counts it.
    pub(super) fn hold(
        self: &Arc<Self>,
        principal: &str,
        share: bool,
    ) -> Result<Reservation, Full> {
        let mut opening = self.lock_opening();
        let being_opened: usize = opening.values().sum();
        if self.open_now() + being_opened >= MAX_SESSIONS {
            return Err(Full::Server);
        }
        let theirs = opening.get(principal).copied().unwrap_or(0);
        if share && self.owned_by(principal) + theirs >= self.per_principal {
            return Err(Full::Share);
        }
        *opening.entry(principal.to_owned()).or_default() += 1;
        Ok(Reservation {
            sessions: self.clone(),
            principal: principal.to_owned(),
            counted: false,
            place: None,
        })
    }

    /// Whether `principal` holds more than its share here, counting the
    /// sessions it is opening (the caller's among them).
    pub(super) fn beyond_share(&self, principal: &str) -> bool {
        let theirs = self.lock_opening().get(principal).copied().unwrap_or(0);
        self.owned_by(principal) + theirs > self.per_principal
    }

    pub(super) fn lock_opening(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.opening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A session `principal` was opening is open, or failed to open.
    pub(super) fn opened(&self, principal: &str) {
        let mut opening = self.lock_opening();
        if let Some(count) = opening.get_mut(principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                opening.remove(principal);
            }
        }
    }

    /// How many sessions here `principal` opened (or had restored here).
    pub(super) fn owned_by(&self, principal: &str) -> usize {
        self.sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter(|session| session.owner.get().is_some_and(|owner| owner == principal))
            .count()
    }

    /// How many sessions are open here, as this manager counts them (rmcp
    /// counts the same ones, less those it has ended by itself and this
    /// manager not yet reaped).
    pub(super) fn open_now(&self) -> usize {
        self.sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Record that principal `owner` opened session `id`, here and, when
    /// sessions are shared, for every replica (in `place`, when one was
    /// held for it; in the principal's count when `counted`). Whether the
    /// store recorded it (always, when sessions are not shared).
    pub(super) async fn claim(
        &self,
        id: &str,
        owner: &str,
        place: Option<&shared::Place>,
        counted: bool,
    ) -> bool {
        let Some(session) = self.session_named(id) else {
            return false;
        };
        let Some(shared) = &self.shared else {
            let _ = session.owner.set(owner.to_owned());
            return true;
        };
        // Known to be the owner's here only once the store knows it too:
        // the reaper takes a session the store does not know for ended.
        let claimed = shared.claim(id, owner, place, counted).await;
        let _ = session.owner.set(owner.to_owned());
        match claimed {
            Ok(()) => true,
            Err(e) => {
                // Redis does not know the session: it ends at its next
                // request here (404), and the client starts another.
                tracing::warn!(error = %e, "an MCP session could not be shared with other replicas");
                false
            }
        }
    }
}
