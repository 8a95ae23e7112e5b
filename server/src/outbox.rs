//! A connection's outgoing bytes: the core encodes replies and notifications
//! straight into the buffer (no intermediate copies), the connection's task
//! takes the whole buffer and writes it in one call (batching), and the
//! buffer is bounded: a client that does not read is disconnected instead of
//! making the server buffer without limit (I7).
//!
//! The outbox also holds what the core and the connection's task share besides
//! the bytes: the cancel flag and the connection's request slots. It wakes
//! exactly one task, the connection's (the one that last called
//! [`Outbox::register`] or polled one of its waits): a connection is served by
//! one task, and one waker slot costs an idle session less than a `Notify` per
//! event and a semaphore.

use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;

use crate::watch::ConnId;

/// What an empty outbox allocates for the first bytes queued: a reply to a
/// read of a few hundred bytes (a 128-byte value and its stat make 220),
/// a notification, a ping's answer.
const FIRST_REPLY_BYTES: usize = 512;

#[derive(Debug, Default)]
struct State {
    buf: BytesMut,
    /// Flush what is queued, then close.
    closing: bool,
    /// The connection's task, woken when bytes are queued, the connection
    /// closes or is cancelled, or a request slot it waits for is free.
    /// Taken by whoever wakes it; the task puts it back each time it runs.
    waker: Option<Waker>,
}

/// The outgoing side of one connection.
///
/// Every connection holds one for as long as it lives, idle or not, and the
/// allocator serves it in steps of 16 bytes: its fields are laid out so that
/// with the `Arc`'s counts it takes 120 bytes, a 128-byte chunk, not 176 (the
/// address as its parts, the limits and the slot count as `u32`s).
#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    /// The connection's id.
    conn: ConnId,
    /// Bytes queued beyond which the client counts as not reading
    /// (`rzk.connection.outgoingBytesMax`, at most `u32::MAX`).
    bytes_max: u32,
    /// The connection's free request slots (`rzk.connection.outstandingMax`):
    /// a slot is taken before a request is read and given back once it is
    /// answered.
    slots: AtomicU32,
    /// The client's address (see [`Outbox::peer`]): kept here, once per
    /// connection, rather than in the connection's task and in the core's table
    /// both; its parts take 19 bytes where a `SocketAddr` takes 32 (an IPv6
    /// address's flow label and scope id are not kept: nothing reads them).
    peer_ip: IpAddr,
    peer_port: u16,
    /// Set when the connection must stop at once: the reader and the writer
    /// both end.
    cancelled: AtomicBool,
    /// The task waits for a slot: the slot given back wakes it.
    slot_wanted: AtomicBool,
}

/// One of a connection's request slots, given back when dropped (its
/// request was answered, or dropped with the connection).
#[derive(Debug)]
pub struct ConnSlot(Arc<Outbox>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let o = &self.0;
        o.slots.fetch_add(1, Ordering::SeqCst);
        // Only a task that found no slot is woken: a request answered
        // while its connection has slots to spare costs no lock here.
        if o.slot_wanted.swap(false, Ordering::SeqCst) {
            o.wake();
        }
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
    /// An empty outbox of connection `conn` from `peer`, which may have
    /// `requests_max` requests in flight (at least one).
    pub fn new(conn: ConnId, peer: SocketAddr, bytes_max: usize, requests_max: usize) -> Outbox {
        Outbox {
            state: Mutex::new(State::default()),
            conn,
            bytes_max: u32::try_from(bytes_max).unwrap_or(u32::MAX),
            slots: AtomicU32::new(u32::try_from(requests_max).unwrap_or(u32::MAX).max(1)),
            peer_ip: peer.ip(),
            peer_port: peer.port(),
            cancelled: AtomicBool::new(false),
            slot_wanted: AtomicBool::new(false),
        }
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        SocketAddr::new(self.peer_ip, self.peer_port)
    }

    /// The connection's id.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the connection's task, if it is waiting.
    fn wake(&self) {
        let waker = self.lock().waker.take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Makes `waker` the one every event of this outbox wakes (the
    /// connection's task calls this each time it runs).
    pub fn register(&self, waker: &Waker) {
        let mut s = self.lock();
        match &s.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
    }

    /// Takes a request slot if one is free (see [`Outbox::taken_slot`]).
    fn take_slot(&self) -> bool {
        let mut free = self.slots.load(Ordering::SeqCst);
        while free > 0 {
            match self
                .slots
                .compare_exchange(free, free - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => free = now,
            }
        }
        false
    }

    /// A request slot if one is free.
    pub fn try_slot(self: &Arc<Self>) -> Option<ConnSlot> {
        self.take_slot().then(|| ConnSlot(self.clone()))
    }

    /// Takes a request slot, or is Pending until one is given back (the
    /// caller's task is woken then). The slot taken is counted, not held:
    /// [`Outbox::taken_slot`] makes it a [`ConnSlot`] and
    /// [`Outbox::give_back_slot`] returns it, so that a connection waiting
    /// for its next request keeps a flag, not a reference.
    pub fn poll_take_slot(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.take_slot() {
            return Poll::Ready(());
        }
        self.register(cx.waker());
        self.slot_wanted.store(true, Ordering::SeqCst);
        // A slot given back between the first try and the flag did not see
        // the flag: look again.
        if self.take_slot() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// The slot [`Outbox::poll_take_slot`] took, as a [`ConnSlot`].
    pub fn taken_slot(self: &Arc<Self>) -> ConnSlot {
        ConnSlot(self.clone())
    }

    /// Gives back the slot [`Outbox::poll_take_slot`] took.
    pub fn give_back_slot(self: &Arc<Self>) {
        drop(self.taken_slot());
    }

    /// A request slot, or Pending until one is given back.
    pub fn poll_slot(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<ConnSlot> {
        self.poll_take_slot(cx).map(|()| self.taken_slot())
    }

    /// Waits for a request slot.
    pub async fn slot(self: &Arc<Self>) -> ConnSlot {
        poll_fn(|cx| self.poll_slot(cx)).await
    }

    /// Stops the connection at once: the reader and the writer both end,
    /// what is queued is dropped.
    pub fn cancel(&self) {
        // Set before the lock that takes the waker: a task that registers
        // under the lock afterwards sees the flag (see `poll_cancelled`).
        self.cancelled.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// Whether [`Outbox::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Ready once [`Outbox::cancel`] has been called; Pending (the caller's
    /// task is woken by the cancel) until then.
    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_cancelled() {
            return Poll::Ready(());
        }
        self.register(cx.waker());
        // A cancel between the check and the registration found no waker.
        if self.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Resolves once [`Outbox::cancel`] has been called.
    pub async fn cancelled(&self) {
        poll_fn(|cx| self.poll_cancelled(cx)).await
    }

    /// Appends whatever `write` writes. Returns false, and cancels the
    /// connection, if bytes were already waiting and the queue now exceeds
    /// its limit; nothing is queued then.
    pub fn push(&self, write: impl FnOnce(&mut BytesMut)) -> bool {
        self.push_len(write).is_some()
    }

    /// [`Outbox::push`], returning how many bytes `write` queued (None
    /// where `push` returns false): a caller that counts reply sizes need
    /// not lock the outbox again to measure the queue before and after.
    pub fn push_len(&self, write: impl FnOnce(&mut BytesMut)) -> Option<usize> {
        let mut s = self.lock();
        if s.closing && self.is_cancelled() {
            return None;
        }
        let before = s.buf.len();
        if s.buf.capacity() == 0 {
            // Grown from nothing, a 220-byte get reply went through five
            // reallocations (8, 16, 32, 64, 128, 256 bytes), a fifth of the
            // instructions of a get (callgrind). One allocation of a size that
            // holds most replies; a larger one doubles from there. The writer
            // takes the whole buffer, so an idle connection still holds
            // nothing.
            s.buf.reserve(FIRST_REPLY_BYTES);
        }
        write(&mut s.buf);
        // A single frame larger than the limit may go out to a client that
        // reads; a queue that is already past the limit means one that does not.
        if before > 0 && s.buf.len() > self.bytes_max as usize {
            s.buf.truncate(before);
            s.closing = true;
            drop(s);
            self.cancel();
            return None;
        }
        let queued = s.buf.len() - before;
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
        Some(queued)
    }

    /// Queued bytes.
    pub fn queued_bytes(&self) -> usize {
        self.lock().buf.len()
    }

    /// Closes the connection once what is queued has been written.
    pub fn close_after_flush(&self) {
        let mut s = self.lock();
        s.closing = true;
        let waker = s.waker.take();
        drop(s);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Closes the connection now, dropping what is queued.
    pub fn close_now(&self) {
        self.cancel();
    }

    /// Whether the connection is closing.
    pub fn is_closing(&self) -> bool {
        self.is_cancelled() || self.lock().closing
    }

    /// For the writer: the bytes to write, or what else to do (Close at once
    /// once cancelled). On Wait, the caller's task is woken by the next
    /// push, close or cancel.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Next {
        if self.is_cancelled() {
            // Stop at once: what is queued is dropped.
            return Next::Close;
        }
        let mut s = self.lock();
        if !s.buf.is_empty() {
            // The whole buffer, not a split of it: a split leaves the empty
            // rest pointing into the written bytes' allocation, which then
            // stays alive (and with it a shared header) for as long as the
            // connection is idle. The next reply allocates anew.
            return Next::Write(std::mem::take(&mut s.buf));
        }
        if s.closing {
            return Next::Close;
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        drop(s);
        // A cancel that found no waker before it was registered.
        if self.is_cancelled() {
            Next::Close
        } else {
            Next::Wait
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count::default());
        (c.clone(), Waker::from(c))
    }

    const PEER: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2181);

    fn next(o: &Outbox) -> Next {
        o.poll_next(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_queue_over_its_limit_cancels_the_connection() {
        let o = Outbox::new(1, PEER, 10, 1);
        assert!(o.push(|b| b.put_slice(b"12345")));
        assert!(!o.push(|b| b.put_slice(b"1234567")));
        assert!(o.is_cancelled());
        assert_eq!(o.queued_bytes(), 5, "the refused bytes are not queued");
    }

    #[test]
    fn the_writer_takes_everything_queued_and_the_outbox_keeps_no_memory() {
        let o = Outbox::new(1, PEER, 100, 1);
        o.push(|b| b.put_slice(b"abc"));
        o.push(|b| b.put_slice(b"def"));
        let Next::Write(written) = next(&o) else {
            panic!("bytes were queued");
        };
        assert_eq!(&written[..], b"abcdef");
        // Nothing in the outbox still refers to the written bytes' memory.
        assert!(written.freeze().is_unique());
        assert_eq!(o.state.lock().unwrap().buf.capacity(), 0);
        o.push(|b| b.put_slice(b"g"));
        assert!(
            matches!(next(&o), Next::Write(b) if &b[..] == b"g"),
            "in order"
        );
        assert!(matches!(next(&o), Next::Wait));
    }

    #[test]
    fn a_waiting_writer_is_woken_by_a_push_a_close_and_a_cancel() {
        let o = Outbox::new(1, PEER, 100, 1);
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(o.poll_next(&mut cx), Next::Wait));
        o.push(|b| b.put_slice(b"abc"));
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the push wakes it");
        o.push(|b| b.put_slice(b"def"));
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "once until it runs");
        assert!(matches!(o.poll_next(&mut cx), Next::Write(_)));
        assert!(matches!(o.poll_next(&mut cx), Next::Wait));
        o.close_after_flush();
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "the close wakes it");
        assert!(matches!(o.poll_next(&mut cx), Next::Close));

        let o = Outbox::new(1, PEER, 100, 1);
        assert!(matches!(o.poll_next(&mut cx), Next::Wait));
        o.close_now();
        assert_eq!(count.0.load(Ordering::SeqCst), 3, "the cancel wakes it");
        o.push(|b| b.put_slice(b"def"));
        assert!(
            matches!(o.poll_next(&mut cx), Next::Close),
            "queued bytes are dropped"
        );
    }

    #[tokio::test]
    async fn a_cancel_ends_a_wait_even_one_that_begins_after_it() {
        let o = Arc::new(Outbox::new(1, PEER, 100, 1));
        let waiter = {
            let o = o.clone();
            tokio::spawn(async move { o.cancelled().await })
        };
        tokio::task::yield_now().await;
        o.close_now();
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("the cancel wakes the waiting task")
            .unwrap();
        o.cancelled().await;
        assert!(o.is_closing());
    }

    #[test]
    fn a_connection_has_as_many_request_slots_as_its_limit() {
        let o = Arc::new(Outbox::new(1, PEER, 100, 2));
        let a = o.try_slot().expect("first");
        let _b = o.try_slot().expect("second");
        assert!(o.try_slot().is_none(), "a third is over the limit");
        drop(a);
        let _c = o
            .try_slot()
            .expect("an answered request gives its slot back");
        assert!(o.try_slot().is_none());
    }

    #[test]
    fn a_slot_given_back_wakes_the_task_that_waits_for_one() {
        let o = Arc::new(Outbox::new(1, PEER, 100, 1));
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let a = o.try_slot().expect("first");
        assert!(o.poll_slot(&mut cx).is_pending());
        drop(a);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let b = match o.poll_slot(&mut cx) {
            Poll::Ready(s) => s,
            Poll::Pending => panic!("the slot given back is free"),
        };
        drop(b);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "no task waits: giving a slot back wakes nobody"
        );
    }

    /// A reply is encoded into one allocation, made once, of
    /// `FIRST_REPLY_BYTES`, and `push_len` says what was queued. Checked by
    /// hand: without the reservation the buffer grows by doubling from 8 bytes
    /// (five reallocations for a get's 220 bytes) and ends at 256.
    #[test]
    fn a_reply_is_encoded_into_one_allocation() {
        let o = Outbox::new(1, PEER, 1 << 20, 1);
        let mut pointers = Vec::new();
        let queued = o.push_len(|b| {
            for _ in 0..220 {
                b.put_u8(7);
                pointers.push(b.as_ptr());
            }
        });
        assert_eq!(queued, Some(220));
        pointers.dedup();
        assert_eq!(pointers.len(), 1, "the buffer was not reallocated");
        assert_eq!(o.state.lock().unwrap().buf.capacity(), FIRST_REPLY_BYTES);
        assert_eq!(o.push_len(|b| b.put_slice(b"abc")), Some(3));
        assert_eq!(o.queued_bytes(), 223);
    }

    #[test]
    fn flush_then_close() {
        let o = Outbox::new(1, PEER, 100, 1);
        o.push(|b| b.put_slice(b"abc"));
        o.close_after_flush();
        assert!(matches!(next(&o), Next::Write(b) if &b[..] == b"abc"));
        assert!(matches!(next(&o), Next::Close));
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// Every connection holds its outbox for as long as it lives, in an `Arc`
    /// (16 bytes of counts) that glibc serves as a chunk of the size plus 8,
    /// rounded up to 16: at 104 bytes or less the chunk is 128 bytes. Checked
    /// by hand: with the address as a `SocketAddr` and the limits as `usize`s
    /// the outbox is 144 bytes (a 176-byte chunk) and this fails.
    #[test]
    fn an_outbox_fits_a_128_byte_chunk() {
        let bytes = std::mem::size_of::<Outbox>();
        eprintln!("outbox {bytes} B");
        assert!(bytes <= 104, "an outbox is {bytes} bytes");
    }

    /// The address reads back whole (IPv4 and IPv6) from its parts.
    #[test]
    fn the_outbox_keeps_the_clients_address() {
        for peer in ["127.0.0.1:2181", "[::1]:40000"] {
            let peer: SocketAddr = peer.parse().unwrap();
            assert_eq!(Outbox::new(1, peer, 100, 1).peer(), peer);
        }
    }
}
