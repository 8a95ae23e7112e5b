//! A connection's outgoing bytes: the core encodes replies and notifications
//! straight into the buffer (no intermediate copies), the connection's writer
//! task takes the whole buffer and writes it in one call (batching), and the
//! buffer is bounded: a client that does not read is disconnected instead of
//! making the server buffer without limit (I7).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::BytesMut;
use tokio::sync::{Notify, Semaphore};

#[derive(Debug, Default)]
struct State {
    buf: BytesMut,
    /// Flush what is queued, then close.
    closing: bool,
}

/// The outgoing side of one connection.
#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    /// Wakes the writer task.
    notify: Notify,
    /// Bytes queued beyond which the client counts as not reading
    /// (`rzk.connection.outgoingBytesMax`).
    bytes_max: usize,
    /// Set when the connection must stop at once: the reader and the writer
    /// both end. A flag and a `Notify` in place of a `CancellationToken`,
    /// which is an allocation of its own per connection (issue 15).
    cancelled: AtomicBool,
    /// Wakes whoever waits in [`Outbox::cancelled`].
    stop: Notify,
    /// The connection's requests in flight (`rzk.connection.outstandingMax`):
    /// a slot is taken before a request is read and given back once it is
    /// answered. Here rather than a semaphore of its own, which was one more
    /// allocation per connection (issue 15).
    slots: Semaphore,
}

/// One of a connection's request slots, given back when dropped (its
/// request was answered, or dropped with the connection).
#[derive(Debug)]
pub struct ConnSlot(Arc<Outbox>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.slots.add_permits(1);
    }
}

/// What the writer should do next.
#[derive(Debug)]
pub enum Next {
    /// Write these bytes.
    Write(BytesMut),
    /// Everything is written and the connection is closing.
    Close,
    /// Nothing to do yet.
    Wait,
}

impl Outbox {
    /// An empty outbox of a connection that may have `requests_max`
    /// requests in flight (at least one).
    pub fn new(bytes_max: usize, requests_max: usize) -> Outbox {
        Outbox {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            bytes_max,
            cancelled: AtomicBool::new(false),
            stop: Notify::new(),
            slots: Semaphore::new(requests_max.max(1)),
        }
    }

    /// A request slot if one is free.
    pub fn try_slot(self: &Arc<Self>) -> Option<ConnSlot> {
        let permit = self.slots.try_acquire().ok()?;
        permit.forget();
        Some(ConnSlot(self.clone()))
    }

    /// Waits for a request slot.
    pub async fn slot(self: &Arc<Self>) -> ConnSlot {
        // The semaphore is never closed.
        if let Ok(permit) = self.slots.acquire().await {
            permit.forget();
        }
        ConnSlot(self.clone())
    }

    /// Stops the connection at once: the reader and the writer both end,
    /// what is queued is dropped.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.stop.notify_waiters();
        self.notify.notify_one();
    }

    /// Whether [`Outbox::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once [`Outbox::cancel`] has been called.
    pub async fn cancelled(&self) {
        // A `Notified` receives `notify_waiters` from the moment it is
        // created, so a cancel between the check and the wait is not missed.
        let stopped = self.stop.notified();
        if self.is_cancelled() {
            return;
        }
        stopped.await;
    }

    /// Appends whatever `write` writes. Returns false, and cancels the
    /// connection, if bytes were already waiting and the queue now exceeds
    /// its limit; nothing is queued then.
    pub fn push(&self, write: impl FnOnce(&mut BytesMut)) -> bool {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.closing && self.is_cancelled() {
            return false;
        }
        let before = s.buf.len();
        write(&mut s.buf);
        // A single frame larger than the limit may go out to a client that
        // reads; a queue that is already past the limit means one that does not.
        if before > 0 && s.buf.len() > self.bytes_max {
            s.buf.truncate(before);
            s.closing = true;
            drop(s);
            self.cancel();
            return false;
        }
        drop(s);
        self.notify.notify_one();
        true
    }

    /// Queued bytes.
    pub fn queued_bytes(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buf
            .len()
    }

    /// Closes the connection once what is queued has been written.
    pub fn close_after_flush(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closing = true;
        self.notify.notify_one();
    }

    /// Closes the connection now, dropping what is queued.
    pub fn close_now(&self) {
        self.cancel();
    }

    /// Whether the connection is closing.
    pub fn is_closing(&self) -> bool {
        self.is_cancelled()
            || self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .closing
    }

    /// For the writer: the bytes to write, or what else to do (Close at once
    /// once cancelled).
    pub fn next(&self) -> Next {
        if self.is_cancelled() {
            // Stop at once: what is queued is dropped.
            return Next::Close;
        }
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !s.buf.is_empty() {
            // The whole buffer, not a split of it: a split leaves the empty
            // rest pointing into the written bytes' allocation, which then
            // stays alive (and with it a shared header) for as long as the
            // connection is idle (issue 15). The next reply allocates anew.
            return Next::Write(std::mem::take(&mut s.buf));
        }
        if s.closing {
            Next::Close
        } else {
            Next::Wait
        }
    }

    /// For the writer: waits until there is something to do, or the
    /// connection is cancelled.
    pub async fn wait(&self) {
        self.notify.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn a_queue_over_its_limit_cancels_the_connection() {
        let o = Outbox::new(10, 1);
        assert!(o.push(|b| b.put_slice(b"12345")));
        assert!(!o.push(|b| b.put_slice(b"1234567")));
        assert!(o.is_cancelled());
        assert_eq!(o.queued_bytes(), 5, "the refused bytes are not queued");
    }

    #[test]
    fn the_writer_takes_everything_queued_and_the_outbox_keeps_no_memory() {
        let o = Outbox::new(100, 1);
        o.push(|b| b.put_slice(b"abc"));
        o.push(|b| b.put_slice(b"def"));
        let Next::Write(written) = o.next() else {
            panic!("bytes were queued");
        };
        assert_eq!(&written[..], b"abcdef");
        // Nothing in the outbox still refers to the written bytes' memory.
        assert!(written.freeze().is_unique());
        assert_eq!(o.state.lock().unwrap().buf.capacity(), 0);
        o.push(|b| b.put_slice(b"g"));
        assert!(
            matches!(o.next(), Next::Write(b) if &b[..] == b"g"),
            "in order"
        );
        assert!(matches!(o.next(), Next::Wait));
    }

    #[tokio::test]
    async fn cancelling_wakes_every_waiter_even_one_that_arrives_late() {
        let o = std::sync::Arc::new(Outbox::new(100, 1));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let o = o.clone();
                tokio::spawn(async move { o.cancelled().await })
            })
            .collect();
        tokio::task::yield_now().await;
        o.close_now();
        for w in waiters {
            w.await.unwrap();
        }
        o.cancelled().await;
        assert!(o.is_closing());
    }

    #[tokio::test]
    async fn a_connection_has_as_many_request_slots_as_its_limit() {
        let o = Arc::new(Outbox::new(100, 2));
        let a = o.try_slot().expect("first");
        let _b = o.try_slot().expect("second");
        assert!(o.try_slot().is_none(), "a third is over the limit");
        drop(a);
        let _c = o
            .try_slot()
            .expect("an answered request gives its slot back");
        assert!(o.try_slot().is_none());
    }

    #[tokio::test]
    async fn a_cancel_wakes_the_writer_and_drops_what_is_queued() {
        let o = std::sync::Arc::new(Outbox::new(100, 1));
        o.push(|b| b.put_slice(b"abc"));
        o.wait().await; // the push's wake-up
        assert!(matches!(o.next(), Next::Write(_)));
        assert!(matches!(o.next(), Next::Wait));
        let writer = {
            let o = o.clone();
            tokio::spawn(async move { o.wait().await })
        };
        tokio::task::yield_now().await;
        o.close_now();
        tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("the cancel wakes a waiting writer")
            .unwrap();
        o.push(|b| b.put_slice(b"def"));
        assert!(matches!(o.next(), Next::Close), "queued bytes are dropped");
    }

    #[test]
    fn flush_then_close() {
        let o = Outbox::new(100, 1);
        o.push(|b| b.put_slice(b"abc"));
        o.close_after_flush();
        assert!(matches!(o.next(), Next::Write(b) if &b[..] == b"abc"));
        assert!(matches!(o.next(), Next::Close));
    }
}
