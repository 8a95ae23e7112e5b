//! Connection states with Curator's semantics, and the stream that delivers them.
//!
//! [`StateTracker`] is a sans-IO machine: the connection task feeds it what happened on
//! the link ([`LinkEvent`]) and the time, and it answers with the public
//! [`ConnectionState`]s to publish, following Curator's rules (docs/recipes.md, "What
//! produces each state"): `CONNECTED` once, then `SUSPENDED` / `RECONNECTED` / `LOST` /
//! `READ_ONLY`, duplicates dropped, `LOST` sticky until the next connection, and a new
//! session always announced by `LOST` before its `RECONNECTED`. It also runs the
//! client-side session deadline (docs/recipes.md, "The client-side deadline"):
//! `timeout × fraction` after the start of a suspension it declares the session lost,
//! once per suspension, and tells the connection task to abandon the session.
//!
//! [`StateStream`] delivers the states to each subscriber in order and never drops one:
//! a subscriber that falls [`STATE_QUEUE_MAX`] events behind gets
//! [`StateStreamError::Lagged`] at the point of loss instead of a silently shortened
//! history (Curator's bounded queue drops the oldest event; docs/recipes.md, "The
//! lifecycle", rule 14).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::types::SessionId;

/// The public connection state, as recipes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    /// The first connection of this client.
    Connected {
        /// The session established.
        session: SessionId,
    },
    /// The connection is lost; the session may still be alive on the server.
    Suspended,
    /// Connected again after `SUSPENDED` or `LOST`. The session differs from the previous
    /// one exactly when a `LOST` came before.
    Reconnected {
        /// The session now in use.
        session: SessionId,
    },
    /// The session is gone: the server said it expired, or the session timeout passed on
    /// the client's clock without reconnecting (the server may still hold the old
    /// session's ephemerals for a while).
    Lost,
    /// Connected to a read-only server: reads work, writes do not.
    ReadOnly {
        /// The session in use.
        session: SessionId,
    },
}

impl ConnectionState {
    /// True for `CONNECTED`, `RECONNECTED` and `READ_ONLY`, like Curator's `isConnected`.
    pub fn is_connected(&self) -> bool {
        match self {
            ConnectionState::Connected { .. }
            | ConnectionState::Reconnected { .. }
            | ConnectionState::ReadOnly { .. } => true,
            ConnectionState::Suspended | ConnectionState::Lost => false,
        }
    }

    /// The session, for the connected states.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            ConnectionState::Connected { session }
            | ConnectionState::Reconnected { session }
            | ConnectionState::ReadOnly { session } => Some(*session),
            ConnectionState::Suspended | ConnectionState::Lost => None,
        }
    }
}

/// What the connection task observed on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// A handshake succeeded.
    Established {
        /// The session now attached to the connection.
        session: SessionId,
        /// The negotiated session timeout.
        timeout_ms: u64,
        /// The server is read-only.
        read_only: bool,
    },
    /// The connection broke, or nothing was heard for the read timeout.
    Disconnected,
    /// The server refused to resume the session: it has expired.
    Expired,
}

/// The answer of [`StateTracker::on_tick`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TickOutcome {
    /// States to publish.
    pub states: Vec<ConnectionState>,
    /// The client-side deadline passed: the connection task must stop resuming the old
    /// session and establish a new one.
    pub abandon_session: bool,
}

/// Curator's connection-state rules as a sans-IO machine. Time is `now_ms`, a
/// monotonic millisecond count chosen by the caller.
#[derive(Debug)]
pub struct StateTracker {
    /// The last state published; `None` before the first connection.
    current: Option<ConnectionState>,
    /// The session of the last successful handshake, to detect a new session.
    last_session: Option<SessionId>,
    /// When the current suspension started; `None` when not suspended or once its
    /// deadline has fired (CURATOR-405: fire once per suspension).
    suspended_since_ms: Option<u64>,
    /// The negotiated timeout of the last connection, else the requested one.
    session_timeout_ms: u64,
    /// `simulatedSessionExpirationPercent`: 1..=100.
    deadline_percent: u64,
}

impl StateTracker {
    /// A tracker for a client that requested `session_timeout_ms`; the local deadline is
    /// `deadline_percent` (clamped to 1..=100) of the session timeout.
    pub fn new(session_timeout_ms: u64, deadline_percent: u32) -> StateTracker {
        StateTracker {
            current: None,
            last_session: None,
            suspended_since_ms: None,
            session_timeout_ms,
            deadline_percent: u64::from(deadline_percent.clamp(1, 100)),
        }
    }

    /// The last published state.
    pub fn current(&self) -> Option<ConnectionState> {
        self.current
    }

    /// When [`StateTracker::on_tick`] must next be called, if at all.
    pub fn deadline_ms(&self) -> Option<u64> {
        // GH-1248: 64-bit arithmetic, no overflow for any timeout and percentage.
        self.suspended_since_ms.map(|since| {
            since.saturating_add(
                self.session_timeout_ms
                    .saturating_mul(self.deadline_percent)
                    / 100,
            )
        })
    }

    /// Feed a link event; returns the states to publish, in order.
    pub fn on_link(&mut self, now_ms: u64, event: LinkEvent) -> Vec<ConnectionState> {
        let mut out = Vec::new();
        match event {
            LinkEvent::Established {
                session,
                timeout_ms,
                read_only,
            } => {
                self.session_timeout_ms = timeout_ms;
                self.suspended_since_ms = None;
                // A new session is always announced by LOST before its RECONNECTED,
                // so no subscriber can mistake it for the old one (docs/recipes.md,
                // "What produces each state", LOST reason (c)).
                if self.last_session.is_some_and(|old| old != session) {
                    self.publish(ConnectionState::Lost, &mut out);
                }
                let next = if read_only {
                    ConnectionState::ReadOnly { session }
                } else if self.last_session.is_none() {
                    ConnectionState::Connected { session }
                } else {
                    ConnectionState::Reconnected { session }
                };
                self.last_session = Some(session);
                self.publish(next, &mut out);
            }
            LinkEvent::Disconnected => match self.current {
                // LOST is sticky with respect to SUSPENDED; nothing to say before the
                // first connection.
                None | Some(ConnectionState::Suspended) | Some(ConnectionState::Lost) => {}
                Some(_) => {
                    self.suspended_since_ms = Some(now_ms);
                    self.publish(ConnectionState::Suspended, &mut out);
                }
            },
            LinkEvent::Expired => {
                self.suspended_since_ms = None;
                if self.current.is_some() {
                    self.publish(ConnectionState::Lost, &mut out);
                }
            }
        }
        out
    }

    /// Check the client-side deadline.
    pub fn on_tick(&mut self, now_ms: u64) -> TickOutcome {
        let mut outcome = TickOutcome::default();
        let Some(deadline) = self.deadline_ms() else {
            return outcome;
        };
        if now_ms < deadline {
            return outcome;
        }
        // Fire once (CURATOR-405); the connection task abandons the session, so the
        // next handshake is a new session and LOST is not repeated.
        self.suspended_since_ms = None;
        self.publish(ConnectionState::Lost, &mut outcome.states);
        outcome.abandon_session = true;
        outcome
    }

    fn publish(&mut self, state: ConnectionState, out: &mut Vec<ConnectionState>) {
        if self.current == Some(state) {
            return;
        }
        self.current = Some(state);
        out.push(state);
    }
}

/// How far a subscriber may fall behind before its stream ends with
/// [`StateStreamError::Lagged`]. States change at most twice per connection attempt, and
/// attempts are paced by the reconnect backoff, so only a subscriber that stopped
/// reading reaches this.
pub const STATE_QUEUE_MAX: usize = 4096;

/// Why a [`StateStream`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateStreamError {
    /// The subscriber fell [`STATE_QUEUE_MAX`] events behind; later events were not
    /// queued. The stream ends here rather than skip events.
    #[error("connection-state subscriber fell {STATE_QUEUE_MAX} events behind")]
    Lagged,
}

#[derive(Debug, Default)]
struct SubQueue {
    inner: Mutex<SubInner>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct SubInner {
    queue: VecDeque<ConnectionState>,
    lagged: bool,
    closed: bool,
}

/// Fans published states out to subscribers, in order, none dropped. The client owns
/// one; an implementer of [`RecipeOps`](crate::recipe::RecipeOps) over another
/// transport can use it too.
#[derive(Debug, Default)]
pub struct StateHub {
    inner: Mutex<HubInner>,
}

#[derive(Debug, Default)]
struct HubInner {
    current: Option<ConnectionState>,
    subscribers: Vec<Weak<SubQueue>>,
    closed: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these short critical sections cannot leave them
    // inconsistent (each is a single push or pop), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl StateHub {
    /// Publish states in order to every live subscriber.
    pub fn publish(&self, states: &[ConnectionState]) {
        if states.is_empty() {
            return;
        }
        let mut hub = lock(&self.inner);
        hub.current = states.last().copied();
        hub.subscribers.retain(|weak| {
            let Some(sub) = weak.upgrade() else {
                return false;
            };
            {
                let mut q = lock(&sub.inner);
                for s in states {
                    if q.lagged {
                        break;
                    }
                    if q.queue.len() >= STATE_QUEUE_MAX {
                        q.lagged = true;
                        break;
                    }
                    q.queue.push_back(*s);
                }
            }
            sub.notify.notify_one();
            true
        });
    }

    /// The current state and a stream of every state published after it, taken
    /// atomically so that nothing falls between the two.
    pub fn subscribe(&self) -> (Option<ConnectionState>, StateStream) {
        let mut hub = lock(&self.inner);
        let sub = Arc::new(SubQueue::default());
        if hub.closed {
            lock(&sub.inner).closed = true;
        } else {
            hub.subscribers.push(Arc::downgrade(&sub));
        }
        (hub.current, StateStream { sub })
    }

    /// End every stream after the states already queued.
    pub fn close(&self) {
        let mut hub = lock(&self.inner);
        hub.closed = true;
        for weak in hub.subscribers.drain(..) {
            if let Some(sub) = weak.upgrade() {
                lock(&sub.inner).closed = true;
                sub.notify.notify_one();
            }
        }
    }
}

/// The connection states published after the subscription, in order, none dropped.
#[derive(Debug)]
pub struct StateStream {
    sub: Arc<SubQueue>,
}

impl StateStream {
    /// The next state; `None` once the client is closed and every queued state was
    /// read; an error if this subscriber fell too far behind.
    pub async fn next(&mut self) -> Option<Result<ConnectionState, StateStreamError>> {
        loop {
            let notified = self.sub.notify.notified();
            {
                let mut q = lock(&self.sub.inner);
                if let Some(s) = q.queue.pop_front() {
                    return Some(Ok(s));
                }
                if q.lagged {
                    q.lagged = false;
                    q.closed = true;
                    return Some(Err(StateStreamError::Lagged));
                }
                if q.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// A state already queued, without waiting.
    pub fn try_next(&mut self) -> Option<ConnectionState> {
        lock(&self.sub.inner).queue.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConnectionState::*;

    const S1: SessionId = SessionId(0x11);
    const S2: SessionId = SessionId(0x22);

    fn up(session: SessionId) -> LinkEvent {
        LinkEvent::Established {
            session,
            timeout_ms: 4000,
            read_only: false,
        }
    }

    #[test]
    fn first_connection_is_connected_then_reconnected() {
        let mut t = StateTracker::new(4000, 100);
        assert_eq!(t.on_link(0, up(S1)), vec![Connected { session: S1 }]);
        assert_eq!(t.on_link(10, LinkEvent::Disconnected), vec![Suspended]);
        assert_eq!(t.on_link(20, up(S1)), vec![Reconnected { session: S1 }]);
        // A second handshake on the same session while RECONNECTED posts nothing.
        assert_eq!(t.on_link(30, up(S1)), vec![]);
    }

    #[test]
    fn disconnect_before_first_connection_posts_nothing() {
        let mut t = StateTracker::new(4000, 100);
        assert_eq!(t.on_link(0, LinkEvent::Disconnected), vec![]);
        assert_eq!(t.on_tick(1_000_000), TickOutcome::default());
    }

    #[test]
    fn new_session_is_announced_by_lost_before_reconnected() {
        let mut t = StateTracker::new(4000, 100);
        t.on_link(0, up(S1));
        assert_eq!(t.on_link(1, LinkEvent::Disconnected), vec![Suspended]);
        assert_eq!(
            t.on_link(2, up(S2)),
            vec![Lost, Reconnected { session: S2 }]
        );
    }

    #[test]
    fn expiry_posts_lost_once_and_lost_is_sticky() {
        let mut t = StateTracker::new(4000, 100);
        t.on_link(0, up(S1));
        t.on_link(1, LinkEvent::Disconnected);
        assert_eq!(t.on_link(2, LinkEvent::Expired), vec![Lost]);
        assert_eq!(t.on_link(3, LinkEvent::Expired), vec![]);
        assert_eq!(t.on_link(4, LinkEvent::Disconnected), vec![]);
        // The new session follows a LOST already posted: no second LOST (dedup).
        assert_eq!(t.on_link(5, up(S2)), vec![Reconnected { session: S2 }]);
    }

    #[test]
    fn client_side_deadline_fires_once_per_suspension() {
        let mut t = StateTracker::new(4000, 50);
        t.on_link(0, up(S1));
        assert_eq!(t.deadline_ms(), None);
        t.on_link(1000, LinkEvent::Disconnected);
        assert_eq!(t.deadline_ms(), Some(3000));
        assert_eq!(t.on_tick(2999), TickOutcome::default());
        let fired = t.on_tick(3000);
        assert_eq!(fired.states, vec![Lost]);
        assert!(fired.abandon_session);
        // CURATOR-405: no second injection.
        assert_eq!(t.deadline_ms(), None);
        assert_eq!(t.on_tick(10_000), TickOutcome::default());
    }

    #[test]
    fn reconnect_before_deadline_cancels_it() {
        let mut t = StateTracker::new(4000, 100);
        t.on_link(0, up(S1));
        t.on_link(100, LinkEvent::Disconnected);
        t.on_link(200, up(S1));
        assert_eq!(t.deadline_ms(), None);
        assert_eq!(t.on_tick(100_000), TickOutcome::default());
    }

    #[test]
    fn deadline_uses_the_negotiated_timeout_without_overflow() {
        let mut t = StateTracker::new(4000, 100);
        t.on_link(
            0,
            LinkEvent::Established {
                session: S1,
                timeout_ms: u64::MAX / 2,
                read_only: false,
            },
        );
        t.on_link(5, LinkEvent::Disconnected);
        assert!(t.deadline_ms().is_some_and(|d| d > 5));
    }

    #[test]
    fn read_only_and_back() {
        let mut t = StateTracker::new(4000, 100);
        let ro = LinkEvent::Established {
            session: S1,
            timeout_ms: 4000,
            read_only: true,
        };
        assert_eq!(t.on_link(0, ro), vec![ReadOnly { session: S1 }]);
        assert_eq!(t.on_link(1, up(S1)), vec![Reconnected { session: S1 }]);
    }

    #[test]
    fn connected_while_lost_publishes_the_reconnect() {
        // CURATOR-525: the published state follows the real connection.
        let mut t = StateTracker::new(4000, 100);
        t.on_link(0, up(S1));
        t.on_link(1, LinkEvent::Disconnected);
        assert_eq!(t.on_tick(4001).states, vec![Lost]);
        assert_eq!(t.on_link(4002, up(S1)), vec![Reconnected { session: S1 }]);
    }

    #[tokio::test]
    async fn stream_keeps_every_event_in_order() {
        let hub = StateHub::default();
        let (current, mut stream) = hub.subscribe();
        assert_eq!(current, None);
        // A burst far larger than Curator's 25-slot queue: nothing is dropped.
        let mut sent = Vec::new();
        for i in 0..1000 {
            let s = if i % 2 == 0 {
                Suspended
            } else {
                Reconnected {
                    session: SessionId(i),
                }
            };
            sent.push(s);
        }
        hub.publish(&sent);
        hub.close();
        let mut got = Vec::new();
        while let Some(s) = stream.next().await {
            got.push(s.expect("not lagged"));
        }
        assert_eq!(got, sent);
    }

    #[tokio::test]
    async fn stream_reports_lag_instead_of_dropping() {
        let hub = StateHub::default();
        let (_, mut stream) = hub.subscribe();
        let burst = vec![Suspended; STATE_QUEUE_MAX + 1];
        hub.publish(&burst);
        for _ in 0..STATE_QUEUE_MAX {
            assert_eq!(stream.next().await, Some(Ok(Suspended)));
        }
        assert_eq!(stream.next().await, Some(Err(StateStreamError::Lagged)));
        assert_eq!(stream.next().await, None);
    }

    #[tokio::test]
    async fn subscribe_returns_current_state_atomically() {
        let hub = StateHub::default();
        hub.publish(&[Connected { session: S1 }]);
        let (current, mut stream) = hub.subscribe();
        assert_eq!(current, Some(Connected { session: S1 }));
        assert_eq!(stream.try_next(), None);
        hub.publish(&[Suspended]);
        assert_eq!(stream.next().await, Some(Ok(Suspended)));
    }
}
