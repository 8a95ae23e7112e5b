//! A connection's outgoing bytes: the core encodes replies and notifications
//! straight into the buffer (no intermediate copies), the connection's writer
//! task takes the whole buffer and writes it in one call (batching), and the
//! buffer is bounded: a client that does not read is disconnected instead of
//! making the server buffer without limit (I7).

use std::sync::{Mutex, PoisonError};

use bytes::BytesMut;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
    /// Cancelled when the connection must stop at once: the reader and the
    /// writer both end.
    pub cancel: CancellationToken,
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
    /// An empty outbox.
    pub fn new(bytes_max: usize) -> Outbox {
        Outbox {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            bytes_max,
            cancel: CancellationToken::new(),
        }
    }

    /// Appends whatever `write` writes. Returns false, and cancels the
    /// connection, if bytes were already waiting and the queue now exceeds
    /// its limit; nothing is queued then.
    pub fn push(&self, write: impl FnOnce(&mut BytesMut)) -> bool {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.closing && self.cancel.is_cancelled() {
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
            self.cancel.cancel();
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
        self.cancel.cancel();
        self.notify.notify_one();
    }

    /// Whether the connection is closing.
    pub fn is_closing(&self) -> bool {
        self.cancel.is_cancelled()
            || self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .closing
    }

    /// For the writer: the bytes to write, or what else to do.
    pub fn next(&self) -> Next {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !s.buf.is_empty() {
            return Next::Write(s.buf.split());
        }
        if s.closing {
            Next::Close
        } else {
            Next::Wait
        }
    }

    /// For the writer: waits until there is something to do.
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
        let o = Outbox::new(10);
        assert!(o.push(|b| b.put_slice(b"12345")));
        assert!(!o.push(|b| b.put_slice(b"1234567")));
        assert!(o.cancel.is_cancelled());
        assert_eq!(o.queued_bytes(), 5, "the refused bytes are not queued");
    }

    #[test]
    fn flush_then_close() {
        let o = Outbox::new(100);
        o.push(|b| b.put_slice(b"abc"));
        o.close_after_flush();
        assert!(matches!(o.next(), Next::Write(b) if &b[..] == b"abc"));
        assert!(matches!(o.next(), Next::Close));
    }
}
